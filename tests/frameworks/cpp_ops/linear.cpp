// y = x @ w for x [B, K] and w [K, N], with its backward. A tiny dense layer.
#include <deep500/deep500.h>

template <typename T>
class Linear : public deep500::CustomOperator {
    int64_t b_, k_, n_;
 public:
    Linear(int64_t b, int64_t k, int64_t n) : b_(b), k_(k), n_(n) {}
    void forward(const T* x, const T* w, T* y) {
        for (int64_t i = 0; i < b_; ++i)
            for (int64_t j = 0; j < n_; ++j) {
                T sum = 0;
                for (int64_t p = 0; p < k_; ++p) sum += x[i * k_ + p] * w[p * n_ + j];
                y[i * n_ + j] = sum;
            }
    }
    void backward(const T* dy, const T* x, const T* w, const T* y, T* dx, T* dw) {
        for (int64_t i = 0; i < b_; ++i)
            for (int64_t j = 0; j < n_; ++j)
                for (int64_t p = 0; p < k_; ++p) {
                    dx[i * k_ + p] += dy[i * n_ + j] * w[p * n_ + j];
                    dw[p * n_ + j] += dy[i * n_ + j] * x[i * k_ + p];
                }
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    return new Linear<DTYPE>(inputs[0].shape[0], inputs[0].shape[1], inputs[1].shape[1]);
}
D500_REGISTER_OP(Linear<DTYPE>);
