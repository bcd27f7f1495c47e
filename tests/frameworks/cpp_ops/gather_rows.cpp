// out[i, :] = table[index[i], :] with int32 indices; an index out of range throws.
// The gradient is scattered (accumulated) into the table; indices get none.
#include <deep500/deep500.h>
#include <stdexcept>
#include <string>

class GatherRows : public deep500::CustomOperator {
    int64_t rows_, cols_, count_;
 public:
    GatherRows(int64_t rows, int64_t cols, int64_t count)
        : rows_(rows), cols_(cols), count_(count) {}
    void forward(const float* table, const int32_t* index, float* out) {
        for (int64_t i = 0; i < count_; ++i) {
            if (index[i] < 0 || index[i] >= rows_)
                throw std::out_of_range("index " + std::to_string(index[i]) +
                                        " is outside the table's " + std::to_string(rows_) +
                                        " rows");
            for (int64_t c = 0; c < cols_; ++c) out[i * cols_ + c] = table[index[i] * cols_ + c];
        }
    }
    void backward(const float* dout, const float* table, const int32_t* index,
                  const float* out, float* dtable, int32_t* dindex) {
        for (int64_t i = 0; i < count_; ++i)
            for (int64_t c = 0; c < cols_; ++c) dtable[index[i] * cols_ + c] += dout[i * cols_ + c];
    }
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new GatherRows(inputs[0].shape[0], inputs[0].shape[1], inputs[1].shape[0]);
}
D500_REGISTER_OP(GatherRows);
