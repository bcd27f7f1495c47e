// Mixed element types: the maximum of each row (float/double) and its index (int64),
// from a [rows, columns] matrix and an int32 [1] tensor holding a column offset that
// is added to the returned index. Backward routes each row's gradient to its argmax.
#include <deep500/deep500.h>

template <typename T>
class RowMax : public deep500::CustomOperator {
 public:
    RowMax(int64_t rows, int64_t columns) : rows_(rows), columns_(columns) {}

    void forward(const T* x, const int32_t* offset, T* values, int64_t* indices) {
        for (int64_t r = 0; r < rows_; ++r) {
            int64_t best = 0;
            for (int64_t c = 1; c < columns_; ++c)
                if (x[r * columns_ + c] > x[r * columns_ + best]) best = c;
            values[r] = x[r * columns_ + best];
            indices[r] = best + offset[0];
        }
    }

    void backward(const T* dvalues, const int64_t*, const T*, const int32_t* offset,
                  const T*, const int64_t* indices, T* dx, int32_t*) {
        for (int64_t r = 0; r < rows_; ++r)
            dx[r * columns_ + (indices[r] - offset[0])] += dvalues[r];
    }

 private:
    int64_t rows_, columns_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new RowMax<DTYPE>(inputs[0].shape[0], inputs[0].shape[1]);
}

D500_REGISTER_OP(RowMax<DTYPE>);
