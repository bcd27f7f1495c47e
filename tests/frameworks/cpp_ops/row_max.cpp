// Row maxima of a matrix and their column indices: two outputs, the second int64
// (non-differentiable). The gradient goes to each row's arg max.
#include <deep500/deep500.h>

template <typename T>
class RowMax : public deep500::CustomOperator {
    int64_t rows_, cols_;
 public:
    RowMax(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {}
    void forward(const T* x, T* max, int64_t* index) {
        for (int64_t r = 0; r < rows_; ++r) {
            int64_t best = 0;
            for (int64_t c = 1; c < cols_; ++c)
                if (x[r * cols_ + c] > x[r * cols_ + best]) best = c;
            max[r] = x[r * cols_ + best];
            index[r] = best;
        }
    }
    void backward(const T* dmax, const int64_t* dindex, const T* x, const T* max,
                  const int64_t* index, T* dx) {
        for (int64_t r = 0; r < rows_; ++r) dx[r * cols_ + index[r]] += dmax[r];
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new RowMax<DTYPE>(inputs[0].shape[0], inputs[0].shape[1]);
}
D500_REGISTER_OP(RowMax<DTYPE>);
