// create_new_op throws: the error must reach Python as a message, not a crash.
#include <deep500/deep500.h>

#include <stdexcept>

class NeedsSquare : public deep500::CustomOperator {
 public:
    void forward(const float*, float*) {}
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    if (inputs[0].ndim != 2 || inputs[0].shape[0] != inputs[0].shape[1])
        throw std::invalid_argument("NeedsSquare takes a square matrix");
    return new NeedsSquare();
}

D500_REGISTER_OP(NeedsSquare);
