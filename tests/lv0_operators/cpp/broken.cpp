// Does not compile: used to test CompilationError.
#include <deep500/deep500.h>

class Broken : public deep500::CustomOperator {
 public:
    void forward(const float* x, float* y) { y[0] = x[0] + undeclared_variable; }
};
