// z = x * tanh(y) elementwise: a smooth nonlinear operator for gradient checks.
#include <deep500/deep500.h>
#include <cmath>

template <typename T>
class MulTanh : public deep500::CustomOperator {
    int64_t n_;
 public:
    explicit MulTanh(int64_t n) : n_(n) {}
    void forward(const T* x, const T* y, T* z) {
        for (int64_t i = 0; i < n_; ++i) z[i] = x[i] * std::tanh(y[i]);
    }
    void backward(const T* dz, const T* x, const T* y, const T* z, T* dx, T* dy) {
        for (int64_t i = 0; i < n_; ++i) {
            T t = std::tanh(y[i]);
            dx[i] += dz[i] * t;
            dy[i] += dz[i] * x[i] * (T(1) - t * t);
        }
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new MulTanh<DTYPE>(deep500::num_elements(inputs[0]));
}
D500_REGISTER_OP(MulTanh<DTYPE>);
