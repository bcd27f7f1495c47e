// z = 2x + y for any element type (DTYPE); throws on x[0] == -12345 to test error paths.
// The exported call counter lets tests prove that a rejected call never reached C++.
#include <deep500/deep500.h>

#include <stdexcept>

static int64_t calls = 0;
D500_EXPORTED int64_t scale_add_calls() { return calls; }

template <typename T>
class ScaleAdd : public deep500::CustomOperator {
 public:
    explicit ScaleAdd(int64_t size) : size_(size) {}

    void forward(const T* x, const T* y, T* z) {
        ++calls;
        if (size_ > 0 && x[0] == T(-12345)) throw std::runtime_error("x[0] is the magic value");
        for (int64_t i = 0; i < size_; ++i) z[i] = T(2) * x[i] + y[i];
    }

    void backward(const T* dz, const T*, const T*, const T*, T* dx, T* dy) {
        ++calls;
        for (int64_t i = 0; i < size_; ++i) {
            dx[i] = T(2) * dz[i];
            dy[i] = dz[i];
        }
    }

 private:
    int64_t size_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new ScaleAdd<DTYPE>(deep500::num_elements(inputs[0]));
}

D500_REGISTER_OP(ScaleAdd<DTYPE>);
