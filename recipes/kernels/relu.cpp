// ONNX Relu as a Deep500 C++ operator: y = max(x, 0), elementwise, any shape.
// Used by recipes/quickstart.yaml to compare a hand-written kernel with the frameworks'.
#include <deep500/deep500.h>

template <typename T>
class Relu : public deep500::CustomOperator {
 public:
    explicit Relu(int64_t size) : size_(size) {}

    void forward(const T* x, T* y) {
        for (int64_t i = 0; i < size_; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
    }

    void backward(const T* dy, const T* x, const T* /*y*/, T* dx) {
        for (int64_t i = 0; i < size_; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
    }

 private:
    int64_t size_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new Relu<DTYPE>(deep500::num_elements(inputs[0]));
}

D500_REGISTER_OP(Relu<DTYPE>);
