// Compiles and links, but forgets D500_REGISTER_OP: loading must say so.
#include <deep500/deep500.h>

class Forgotten : public deep500::CustomOperator {
 public:
    void forward(const float* x, float* y) { y[0] = x[0]; }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t*, int, deep500::tensor_t*, int) {
    return new Forgotten();
}
