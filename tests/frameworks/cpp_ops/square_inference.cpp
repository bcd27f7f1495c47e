// y = x * x without a backward method: an inference-only operator.
#include <deep500/deep500.h>

template <typename T>
class SquareInference : public deep500::CustomOperator {
    int64_t n_;
 public:
    explicit SquareInference(int64_t n) : n_(n) {}
    void forward(const T* x, T* y) {
        for (int64_t i = 0; i < n_; ++i) y[i] = x[i] * x[i];
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    return new SquareInference<DTYPE>(deep500::num_elements(inputs[0]));
}
D500_REGISTER_OP(SquareInference<DTYPE>);
