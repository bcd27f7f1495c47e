// The sum of all elements (a reduction kernel for benchmarks/lv0_cppop_overhead.py),
// accumulated in double, written to a one-element output. Backward broadcasts the
// output gradient to every input element.
#include <deep500/deep500.h>

template <typename T>
class ReduceSum : public deep500::CustomOperator {
 public:
    explicit ReduceSum(int64_t size) : size_(size) {}

    void forward(const T* x, T* total) {
        double sum = 0.0;
        for (int64_t i = 0; i < size_; ++i) sum += x[i];
        total[0] = static_cast<T>(sum);
    }

    void backward(const T* dtotal, const T*, const T*, T* dx) {
        for (int64_t i = 0; i < size_; ++i) dx[i] = dtotal[0];
    }

 private:
    int64_t size_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*, int) {
    return new ReduceSum<DTYPE>(deep500::num_elements(inputs[0]));
}

D500_REGISTER_OP(ReduceSum<DTYPE>);
