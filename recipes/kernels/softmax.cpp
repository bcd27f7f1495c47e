// ONNX Softmax over the last axis (axis = -1) as a Deep500 C++ operator: each row is
// shifted by its maximum before exponentiation, so large logits do not overflow.
// Used by recipes/quickstart.yaml next to the frameworks' softmax.
#include <deep500/deep500.h>

#include <cmath>
#include <stdexcept>

template <typename T>
class Softmax : public deep500::CustomOperator {
 public:
    Softmax(int64_t rows, int64_t columns) : rows_(rows), columns_(columns) {}

    void forward(const T* x, T* y) {
        for (int64_t r = 0; r < rows_; ++r) {
            const T* in = x + r * columns_;
            T* out = y + r * columns_;
            T largest = in[0];
            for (int64_t c = 1; c < columns_; ++c) largest = in[c] > largest ? in[c] : largest;
            T total = T(0);
            for (int64_t c = 0; c < columns_; ++c) {
                out[c] = std::exp(in[c] - largest);
                total += out[c];
            }
            const T scale = T(1) / total;
            for (int64_t c = 0; c < columns_; ++c) out[c] *= scale;
        }
    }

    // dx = y * (dy - sum(dy * y)) per row.
    void backward(const T* dy, const T* /*x*/, const T* y, T* dx) {
        for (int64_t r = 0; r < rows_; ++r) {
            const T* g = dy + r * columns_;
            const T* out = y + r * columns_;
            T dot = T(0);
            for (int64_t c = 0; c < columns_; ++c) dot += g[c] * out[c];
            for (int64_t c = 0; c < columns_; ++c) dx[r * columns_ + c] = out[c] * (g[c] - dot);
        }
    }

 private:
    int64_t rows_, columns_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs, deep500::tensor_t*,
                                  int) {
    if (ninputs != 1 || inputs[0].ndim < 1)
        throw std::invalid_argument("Softmax takes one tensor of rank >= 1");
    const int64_t columns = inputs[0].shape[inputs[0].ndim - 1];
    return new Softmax<DTYPE>(deep500::num_elements(inputs[0]) / columns, columns);
}

D500_REGISTER_OP(Softmax<DTYPE>);
