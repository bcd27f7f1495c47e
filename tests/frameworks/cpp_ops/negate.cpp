// y = -x, inference only: the class has no backward method.
#include <deep500/deep500.h>

class Negate : public deep500::CustomOperator {
    int64_t n_;
 public:
    explicit Negate(int64_t n) : n_(n) {}
    void forward(const float* x, float* y) {
        for (int64_t i = 0; i < n_; ++i) y[i] = -x[i];
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new Negate(deep500::num_elements(inputs[0]));
}
D500_REGISTER_OP(Negate);
