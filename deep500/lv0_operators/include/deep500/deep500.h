// Deep500 custom operators in C++: the interface between an operator class and Python.
//
// A user writes a class derived from deep500::CustomOperator with
//
//     void forward(const T1* in1, ..., U1* out1, ...);
//     void backward(const U1* next_grad1, ...,     // one per output
//                   const T1* fwd_in1, ...,        // the forward inputs
//                   const U1* fwd_out1, ...,       // the forward outputs
//                   T1* in_grad1, ...);            // one per input, written by the call
//
// (inputs first, then outputs; element types float, double, int32_t, int64_t, uint8_t,
// int8_t or bool), an exported factory
//
//     D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
//                                       deep500::tensor_t* outputs, int noutputs);
//
// returning `new ClassName(...)`, and D500_REGISTER_OP(ClassName) once. The macro generates the C ABI that Deep500's
// Python side loads with ctypes: the forward and backward signatures (element types and
// constness per argument, checked against the tensor descriptors before any call), and
// forward/backward entry points that unpack an array of pointers into the typed
// arguments and turn C++ exceptions into error messages instead of crashes.
//
// Compile-time definitions from compile_custom_cppop: DTYPE (the C++ type of the first
// input), D500_NUM_INPUTS, D500_NUM_OUTPUTS, plus any additional_definitions.
#ifndef DEEP500_DEEP500_H
#define DEEP500_DEEP500_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if defined(_WIN32)
#define D500_EXPORTED extern "C" __declspec(dllexport)
#else
#define D500_EXPORTED extern "C" __attribute__((visibility("default")))
#endif

// Bumped whenever the exported functions or tensor_t change; Python refuses other values.
#define D500_ABI_VERSION 1
#define D500_MAX_DIMS 8

namespace deep500 {

// Element type codes shared with Python (deep500/utils/tensor_desc.py, DTYPE_CODES).
enum dtype_code : int32_t {
    D500_FLOAT32 = 0,
    D500_FLOAT64 = 1,
    D500_INT32 = 2,
    D500_INT64 = 3,
    D500_FLOAT16 = 4,
    D500_UINT8 = 5,
    D500_INT8 = 6,
    D500_BOOL = 7,
};

// What a tensor is, without its data. Same layout as the ctypes struct in Python.
typedef struct tensor_t {
    int32_t dtype;                 // a dtype_code
    int32_t ndim;                  // number of used entries in shape
    int64_t shape[D500_MAX_DIMS];  // row-major extents; unused entries are 0
} tensor_t;

inline int64_t num_elements(const tensor_t& t) {
    int64_t count = 1;
    for (int32_t axis = 0; axis < t.ndim; ++axis) count *= t.shape[axis];
    return count;
}

// Base class of every C++ operator. forward and backward are not virtual: their
// signatures differ per operator and are read by D500_REGISTER_OP at compile time.
class CustomOperator {
 public:
    virtual ~CustomOperator() = default;
};

namespace detail {

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int32_t value = D500_FLOAT32; };
template <> struct dtype_of<double> { static constexpr int32_t value = D500_FLOAT64; };
template <> struct dtype_of<int32_t> { static constexpr int32_t value = D500_INT32; };
template <> struct dtype_of<int64_t> { static constexpr int32_t value = D500_INT64; };
template <> struct dtype_of<uint8_t> { static constexpr int32_t value = D500_UINT8; };
template <> struct dtype_of<int8_t> { static constexpr int32_t value = D500_INT8; };
template <> struct dtype_of<bool> { static constexpr int32_t value = D500_BOOL; };

template <typename Arg> struct argument {
    static_assert(std::is_pointer<Arg>::value,
                  "deep500: forward/backward arguments must be pointers to tensor data");
    using element = typename std::remove_cv<typename std::remove_pointer<Arg>::type>::type;
    static constexpr int32_t dtype = dtype_of<element>::value;
    static constexpr int32_t is_const =
        std::is_const<typename std::remove_pointer<Arg>::type>::value ? 1 : 0;
};

// Signature of a member function void Op::f(Args...): its arity, the element type and
// constness of each argument, and a call that unpacks an array of pointers.
template <typename Method> struct signature;
template <typename Op, typename... Args> struct signature<void (Op::*)(Args...)> {
    static constexpr int32_t arity = static_cast<int32_t>(sizeof...(Args));

    static void describe(int32_t* dtypes, int32_t* is_const) {
        const int32_t codes[] = {argument<Args>::dtype..., 0};
        const int32_t consts[] = {argument<Args>::is_const..., 0};
        for (int32_t i = 0; i < arity; ++i) {
            dtypes[i] = codes[i];
            is_const[i] = consts[i];
        }
    }

    template <std::size_t... I>
    static void call(Op* op, void (Op::*method)(Args...), void* const* tensors,
                     std::index_sequence<I...>) {
        (op->*method)(static_cast<Args>(tensors[I])...);
    }

    static void call(Op* op, void (Op::*method)(Args...), void* const* tensors) {
        call(op, method, tensors, std::index_sequence_for<Args...>{});
    }
};

template <typename Op, typename = void> struct has_backward : std::false_type {};
template <typename Op>
struct has_backward<Op, decltype(void(&Op::backward))> : std::true_type {};

// forward and (when the class has one) backward, by signature; -1 marks "no backward".
template <typename Op> struct forward_method {
    using sig = signature<decltype(&Op::forward)>;
    static int32_t describe(int32_t* dtypes, int32_t* is_const, int32_t capacity) {
        if (capacity >= sig::arity) sig::describe(dtypes, is_const);
        return sig::arity;
    }
    static void call(Op* op, void* const* tensors) { sig::call(op, &Op::forward, tensors); }
};

template <typename Op, bool = has_backward<Op>::value> struct backward_method {
    static int32_t describe(int32_t*, int32_t*, int32_t) { return -1; }
    static void call(Op*, void* const*) {
        throw std::runtime_error("this operator has no backward method");
    }
};
template <typename Op> struct backward_method<Op, true> {
    using sig = signature<decltype(&Op::backward)>;
    static int32_t describe(int32_t* dtypes, int32_t* is_const, int32_t capacity) {
        if (capacity >= sig::arity) sig::describe(dtypes, is_const);
        return sig::arity;
    }
    static void call(Op* op, void* const* tensors) { sig::call(op, &Op::backward, tensors); }
};

// The message of the last failed call on this thread, read by Python after a failure.
inline std::string& last_error() {
    thread_local std::string message;
    return message;
}

template <typename F> inline int32_t guarded(F&& body) {
    try {
        body();
        return 0;
    } catch (const std::exception& error) {
        last_error() = error.what();
    } catch (...) {
        last_error() = "unknown C++ exception (not derived from std::exception)";
    }
    return 1;
}

}  // namespace detail
}  // namespace deep500

// The factory every operator library exports (written by the user).
D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs);

#define D500_REGISTER_OP(OpClass)                                                        \
    static_assert(std::is_base_of<deep500::CustomOperator, OpClass>::value,              \
                  #OpClass " must derive from deep500::CustomOperator");                 \
    D500_EXPORTED int32_t d500_abi_version() { return D500_ABI_VERSION; }               \
    D500_EXPORTED const char* d500_op_class() { return #OpClass; }                      \
    D500_EXPORTED const char* d500_last_error() {                                       \
        return deep500::detail::last_error().c_str();                                    \
    }                                                                                    \
    D500_EXPORTED int32_t d500_forward_signature(int32_t* dtypes, int32_t* is_const,    \
                                                 int32_t capacity) {                     \
        return deep500::detail::forward_method<OpClass>::describe(dtypes, is_const,      \
                                                                  capacity);             \
    }                                                                                    \
    D500_EXPORTED int32_t d500_backward_signature(int32_t* dtypes, int32_t* is_const,   \
                                                  int32_t capacity) {                    \
        return deep500::detail::backward_method<OpClass>::describe(dtypes, is_const,     \
                                                                   capacity);            \
    }                                                                                    \
    D500_EXPORTED void* d500_create(deep500::tensor_t* inputs, int32_t ninputs,         \
                                    deep500::tensor_t* outputs, int32_t noutputs) {      \
        void* op = nullptr;                                                              \
        if (deep500::detail::guarded([&] {                                               \
                op = create_new_op(inputs, ninputs, outputs, noutputs);                  \
                if (op == nullptr) throw std::runtime_error("create_new_op returned null"); \
            }) != 0) return nullptr;                                                     \
        return op;                                                                       \
    }                                                                                    \
    D500_EXPORTED void d500_delete(void* op) {                                          \
        delete static_cast<OpClass*>(op);                                \
    }                                                                                    \
    D500_EXPORTED int32_t d500_forward(void* op, void* const* tensors) {                \
        return deep500::detail::guarded([&] {                                            \
            deep500::detail::forward_method<OpClass>::call(static_cast<OpClass*>(op),    \
                                                           tensors);                     \
        });                                                                              \
    }                                                                                    \
    D500_EXPORTED int32_t d500_backward(void* op, void* const* tensors) {               \
        return deep500::detail::guarded([&] {                                            \
            deep500::detail::backward_method<OpClass>::call(static_cast<OpClass*>(op),   \
                                                            tensors);                    \
        });                                                                              \
    }

#endif  // DEEP500_DEEP500_H
