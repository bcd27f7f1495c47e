// Two inputs, two outputs, integers on both sides: for x [N, M] and idx [N] (int64),
// picked[i] = x[i, idx[i]] and argmax[i] = argmax_j x[i, j] (int64, not differentiable).
// backward writes one element per row of dx, relying on zero-filled input gradients.
#include <deep500/deep500.h>
#include <stdexcept>
#include <string>

template <typename T>
class PickArgmax : public deep500::CustomOperator {
    int64_t n_, m_;
 public:
    PickArgmax(int64_t n, int64_t m) : n_(n), m_(m) {}
    void forward(const T* x, const int64_t* idx, T* picked, int64_t* argmax) {
        for (int64_t i = 0; i < n_; ++i) {
            if (idx[i] < 0 || idx[i] >= m_)
                throw std::out_of_range("index " + std::to_string(idx[i]) + " in row " +
                                        std::to_string(i) + " is out of range");
            picked[i] = x[i * m_ + idx[i]];
            int64_t best = 0;
            for (int64_t j = 1; j < m_; ++j) if (x[i * m_ + j] > x[i * m_ + best]) best = j;
            argmax[i] = best;
        }
    }
    void backward(const T* dpicked, const int64_t* dargmax, const T* x, const int64_t* idx,
                  const T* picked, const int64_t* argmax, T* dx, int64_t* didx) {
        for (int64_t i = 0; i < n_; ++i) dx[i * m_ + idx[i]] += dpicked[i];
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    return new PickArgmax<DTYPE>(inputs[0].shape[0], inputs[0].shape[1]);
}
D500_REGISTER_OP(PickArgmax<DTYPE>);
