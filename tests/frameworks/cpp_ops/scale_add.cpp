// z = 2x + y elementwise; forward throws on the magic value x[0] == -12345, backward on
// dz[0] == -12345 (to test that C++ exceptions reach Python).
#include <deep500/deep500.h>
#include <stdexcept>

template <typename T>
class ScaleAdd : public deep500::CustomOperator {
    int64_t n_;
 public:
    ScaleAdd(int64_t n) : n_(n) {}
    void forward(const T* x, const T* y, T* z) {
        if (x[0] == T(-12345)) throw std::runtime_error("magic value");
        for (int64_t i = 0; i < n_; ++i) z[i] = T(2) * x[i] + y[i];
    }
    void backward(const T* dz, const T* x, const T* y, const T* z, T* dx, T* dy) {
        if (dz[0] == T(-12345)) throw std::runtime_error("magic gradient");
        for (int64_t i = 0; i < n_; ++i) { dx[i] = T(2) * dz[i]; dy[i] = dz[i]; }
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    return new ScaleAdd<DTYPE>(deep500::num_elements(inputs[0]));
}
D500_REGISTER_OP(ScaleAdd<DTYPE>);
