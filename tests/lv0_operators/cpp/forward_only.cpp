// An inference-only operator on int32 and int64: y = x * FACTOR (a compile definition).
#include <deep500/deep500.h>

#ifndef FACTOR
#define FACTOR 3
#endif

class Times : public deep500::CustomOperator {
 public:
    explicit Times(int64_t size) : size_(size) {}
    void forward(const int32_t* x, int64_t* y) {
        for (int64_t i = 0; i < size_; ++i) y[i] = static_cast<int64_t>(x[i]) * FACTOR;
    }

 private:
    int64_t size_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new Times(deep500::num_elements(inputs[0]));
}

D500_REGISTER_OP(Times);
