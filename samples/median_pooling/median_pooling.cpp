// 2-D median pooling on NCHW tensors, a Deep500 custom operator.
//
// Each output element is the median of a KERNEL x KERNEL window of its input channel;
// windows start every STRIDE elements, with no padding, so
//     out[n][c][i][j] = median(in[n][c][i*STRIDE + a][j*STRIDE + b]), 0 <= a, b < KERNEL
// and the output is N x C x ((H - KERNEL) / STRIDE + 1) x ((W - KERNEL) / STRIDE + 1).
//
// The median of an even-sized window is the lower median: the element of 0-based rank
// (KERNEL*KERNEL - 1) / 2 in ascending order. It is always an element of the window, so
// the operator selects an input element per output, and backward sends each output's
// gradient to that element (summed where overlapping windows select the same one).
// When several elements equal the median, the first of them in row-major window order
// is selected, so the gradient's destination is deterministic. NaNs rank above every
// number (as in numpy.sort).
//
// Compile definitions: KERNEL (default 2), STRIDE (default KERNEL); DTYPE comes from
// Deep500 (the element type of the input: float or double).
#include <deep500/deep500.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#ifndef KERNEL
#define KERNEL 2
#endif
#ifndef STRIDE
#define STRIDE KERNEL
#endif

static_assert(KERNEL >= 1 && STRIDE >= 1, "KERNEL and STRIDE must be positive");

template <typename T>
class MedianPooling : public deep500::CustomOperator {
 public:
    static constexpr int kWindow = KERNEL * KERNEL;
    static constexpr int kRank = (kWindow - 1) / 2;  // the lower median

    MedianPooling(int64_t planes, int64_t height, int64_t width)
        : planes_(planes), height_(height), width_(width),
          out_height_((height - KERNEL) / STRIDE + 1),
          out_width_((width - KERNEL) / STRIDE + 1) {}

    int64_t out_height() const { return out_height_; }
    int64_t out_width() const { return out_width_; }

    void forward(const T* input, T* output) {
        for (int64_t plane = 0; plane < planes_; ++plane) {
            const T* in = input + plane * height_ * width_;
            T* out = output + plane * out_height_ * out_width_;
            for (int64_t i = 0; i < out_height_; ++i)
                for (int64_t j = 0; j < out_width_; ++j)
                    out[i * out_width_ + j] = in[median_index(in, i, j)];
        }
    }

    // The argmedian is recomputed from the forward input rather than remembered from
    // forward: the operator object then holds no per-call state, so several forward
    // calls may precede their backward calls (as in a framework's autograd).
    void backward(const T* output_grad, const T* input, const T* output, T* input_grad) {
        (void)output;
        for (int64_t plane = 0; plane < planes_; ++plane) {
            const T* in = input + plane * height_ * width_;
            const T* grad_out = output_grad + plane * out_height_ * out_width_;
            T* grad_in = input_grad + plane * height_ * width_;  // zero-filled by Deep500
            for (int64_t i = 0; i < out_height_; ++i)
                for (int64_t j = 0; j < out_width_; ++j)
                    grad_in[median_index(in, i, j)] += grad_out[i * out_width_ + j];
        }
    }

 private:
    // A strict weak order for std::nth_element: by value, NaNs above every number.
    static bool below(T a, T b) { return std::isnan(b) ? !std::isnan(a) : a < b; }
    static bool same(T a, T b) { return a == b || (std::isnan(a) && std::isnan(b)); }

    // Offset in the input plane of the median of output window (i, j): the first
    // element of the window, in row-major order, equal to its lower median.
    int64_t median_index(const T* in, int64_t i, int64_t j) const {
        const int64_t top_left = i * STRIDE * width_ + j * STRIDE;
        std::array<T, kWindow> values;
        for (int a = 0; a < KERNEL; ++a)
            for (int b = 0; b < KERNEL; ++b)
                values[a * KERNEL + b] = in[top_left + a * width_ + b];
        std::nth_element(values.begin(), values.begin() + kRank, values.end(), below);
        const T median = values[kRank];
        for (int a = 0; a < KERNEL; ++a)
            for (int b = 0; b < KERNEL; ++b)
                if (same(in[top_left + a * width_ + b], median))
                    return top_left + a * width_ + b;
        return top_left;  // unreachable: the median is one of the window's values
    }

    int64_t planes_, height_, width_, out_height_, out_width_;
};

static std::string shape_string(const deep500::tensor_t& t) {
    std::string text;
    for (int32_t axis = 0; axis < t.ndim; ++axis)
        text += (axis ? "x" : "") + std::to_string(t.shape[axis]);
    return text;
}

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    if (ninputs != 1 || noutputs != 1)
        throw std::invalid_argument("median_pooling takes one input and one output");
    const deep500::tensor_t& in = inputs[0];
    const deep500::tensor_t& out = outputs[0];
    if (in.ndim != 4 || in.shape[2] < KERNEL || in.shape[3] < KERNEL)
        throw std::invalid_argument("median_pooling: the input must be NCHW with H and W >= " +
                                    std::to_string(KERNEL) + ", got " + shape_string(in));
    auto* op = new MedianPooling<DTYPE>(in.shape[0] * in.shape[1], in.shape[2], in.shape[3]);
    if (out.ndim != 4 || out.shape[0] != in.shape[0] || out.shape[1] != in.shape[1] ||
        out.shape[2] != op->out_height() || out.shape[3] != op->out_width()) {
        const std::string expected = std::to_string(in.shape[0]) + "x" +
                                     std::to_string(in.shape[1]) + "x" +
                                     std::to_string(op->out_height()) + "x" +
                                     std::to_string(op->out_width());
        delete op;
        throw std::invalid_argument("median_pooling (KERNEL=" + std::to_string(KERNEL) +
                                    ", STRIDE=" + std::to_string(STRIDE) + "): input " +
                                    shape_string(in) + " gives output " + expected +
                                    ", not " + shape_string(out));
    }
    return op;
}

D500_REGISTER_OP(MedianPooling<DTYPE>);
