// Deep500's generic TensorFlow kernel: any Deep500 C++ operator as a TensorFlow op.
//
// Two ops, D500CustomOp (forward) and D500CustomOpGrad (backward), call the C ABI that
// D500_REGISTER_OP generates (deep500/lv0_operators/include/deep500/deep500.h) through
// function pointers, on the tensors' own memory: no Python and no copies while a graph
// runs. deep500/frameworks/tensorflow/tf_kernel.py compiles this file once per
// TensorFlow installation; custom_ops.py adds the nodes and registers the gradient.
//
// The operator instance (d500_create's result) and the library's d500_forward,
// d500_backward and d500_last_error are passed as integer attributes holding their
// addresses in this process. Such a graph is only meaningful in the process that built
// it: it cannot run from a SavedModel or in another process, like the numpy_function
// graph it replaces. Python keeps the operator alive as long as a graph that uses it, and
// registers every live instance here (d500_tf_register, with a number that is never
// reused): a node whose instance is not registered (a graph saved, imported or moved
// from elsewhere) fails when its kernel is created, instead of calling a dangling
// address.
//
// Pointer order (the C ABI's): forward gets inputs then outputs; backward gets output
// gradients, forward inputs, forward outputs, then input gradients, which are
// zero-filled first so that a C++ backward may accumulate into them.
//
// Both ops are stateful: TensorFlow neither constant-folds nor merges two calls, and
// tf.function's automatic control dependencies run them in program order.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::PartialTensorShape;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

using d500_call_fn = int32_t (*)(void* op, void* const* tensors);
using d500_error_fn = const char* (*)();

// Live operator instances: (address, instance number) pairs that Python registered.
std::mutex registry_mutex;
std::set<std::pair<int64_t, int64_t>> registry;

bool Registered(int64_t handle, int64_t instance) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    return registry.count({handle, instance}) != 0;
}

// Outputs take the static shapes in the attribute `attr` (the tensor descriptors').
absl::Status ShapesFromAttr(InferenceContext* c, const char* attr) {
    std::vector<PartialTensorShape> shapes;
    TF_RETURN_IF_ERROR(c->GetAttr(attr, &shapes));
    if (static_cast<int>(shapes.size()) != c->num_outputs())
        return absl::InvalidArgumentError(std::string(attr) + " has " +
                                          std::to_string(shapes.size()) + " shapes for " +
                                          std::to_string(c->num_outputs()) + " outputs");
    for (int i = 0; i < c->num_outputs(); ++i) {
        ShapeHandle shape;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &shape));
        c->set_output(i, shape);
    }
    return absl::OkStatus();
}

// Shape as Python prints a tuple: (5, 3), (5,), ().
std::string PythonTuple(const TensorShape& shape) {
    std::string text = "(";
    for (int axis = 0; axis < shape.dims(); ++axis) {
        if (axis) text += ", ";
        text += std::to_string(shape.dim_size(axis));
    }
    return text + (shape.dims() == 1 ? ",)" : ")");
}

// The data pointers of one call. Compute may run on several threads at once (calls of
// one tf.function from several threads share its kernels), so they are not a member.
using Pointers = absl::InlinedVector<void*, 16>;

// Shared by forward and backward: the attributes, the shape checks, and the call.
class D500KernelBase : public OpKernel {
 public:
    D500KernelBase(OpKernelConstruction* c, const char* fn_attr, const char* method)
        : OpKernel(c), method_(method) {
        int64_t handle = 0, instance = 0, fn = 0, error_fn = 0;
        OP_REQUIRES_OK(c, c->GetAttr("handle", &handle));
        OP_REQUIRES_OK(c, c->GetAttr("instance", &instance));
        OP_REQUIRES_OK(c, c->GetAttr(fn_attr, &fn));
        OP_REQUIRES_OK(c, c->GetAttr("last_error_fn", &error_fn));
        OP_REQUIRES_OK(c, c->GetAttr("op_name", &op_name_));
        OP_REQUIRES_OK(c, c->GetAttr("descriptions", &descriptions_));
        std::vector<PartialTensorShape> inputs, outputs;
        OP_REQUIRES_OK(c, c->GetAttr("input_shapes", &inputs));
        OP_REQUIRES_OK(c, c->GetAttr("output_shapes", &outputs));
        OP_REQUIRES(c, handle != 0 && fn != 0 && error_fn != 0,
                    absl::InvalidArgumentError(op_name_ + ": null operator or function"));
        OP_REQUIRES(c, Registered(handle, instance),
                    absl::FailedPreconditionError(
                        op_name_ + ": this node refers to a Deep500 operator instance that "
                        "does not exist in this process. Graphs with D500CustomOp nodes "
                        "cannot be saved (SavedModel), imported or moved to another "
                        "process; build them from d5tf.custom_op in the process that "
                        "runs them"));
        for (const auto* list : {&inputs, &outputs}) {
            for (const auto& partial : *list) {
                TensorShape shape;
                OP_REQUIRES(c, partial.AsTensorShape(&shape),
                            absl::InvalidArgumentError(op_name_ + ": a descriptor shape "
                                                       "is not fully defined"));
                (list == &inputs ? input_shapes_ : output_shapes_).push_back(shape);
            }
        }
        OP_REQUIRES(c, descriptions_.size() == input_shapes_.size() + output_shapes_.size(),
                    absl::InvalidArgumentError(op_name_ + ": one description per tensor"));
        op_ = reinterpret_cast<void*>(static_cast<intptr_t>(handle));
        fn_ = reinterpret_cast<d500_call_fn>(static_cast<intptr_t>(fn));
        last_error_ = reinterpret_cast<d500_error_fn>(static_cast<intptr_t>(error_fn));
    }

 protected:
    // Appends the data pointer of input `index`, which must have `shape` (the
    // descriptor `description`); false (and the context's status set) otherwise.
    bool AddInput(OpKernelContext* ctx, Pointers& pointers, int index,
                  const TensorShape& shape, const std::string& what,
                  const std::string& description) const {
        const Tensor& tensor = ctx->input(index);
        if (tensor.shape() != shape) {
            ctx->CtxFailure(absl::InvalidArgumentError(
                "ShapeError: " + op_name_ + " " + what + ": expected " + description +
                ", got a tensor of shape " + PythonTuple(tensor.shape()) +
                " (checked before C++ ran)"));
            return false;
        }
        pointers.push_back(const_cast<char*>(tensor.tensor_data().data()));
        return true;
    }

    bool AddOutput(OpKernelContext* ctx, Pointers& pointers, int index,
                   const TensorShape& shape, bool zero) const {
        Tensor* tensor = nullptr;
        const absl::Status status = ctx->allocate_output(index, shape, &tensor);
        if (!status.ok()) {
            ctx->CtxFailure(status);
            return false;
        }
        char* data = const_cast<char*>(tensor->tensor_data().data());
        if (zero) std::memset(data, 0, tensor->TotalBytes());
        pointers.push_back(data);
        return true;
    }

    void Call(OpKernelContext* ctx, const Pointers& pointers) const {
        if (fn_(op_, pointers.data()) != 0) {
            const char* message = last_error_();
            ctx->CtxFailure(absl::UnknownError(
                "CppOperatorError: " + op_name_ + "." + method_ + " raised: " +
                (message && *message ? message : "(no message)")));
        }
    }

    std::string op_name_, method_;
    std::vector<std::string> descriptions_;  // inputs', then outputs' tensordesc text
    std::vector<TensorShape> input_shapes_, output_shapes_;
    void* op_ = nullptr;
    d500_call_fn fn_ = nullptr;
    d500_error_fn last_error_ = nullptr;
};

class D500ForwardKernel : public D500KernelBase {
 public:
    explicit D500ForwardKernel(OpKernelConstruction* c)
        : D500KernelBase(c, "forward_fn", "forward") {}

    void Compute(OpKernelContext* ctx) override {
        const int inputs = static_cast<int>(input_shapes_.size());
        const int outputs = static_cast<int>(output_shapes_.size());
        Pointers pointers;
        for (int i = 0; i < inputs; ++i)
            if (!AddInput(ctx, pointers, i, input_shapes_[i], "input " + std::to_string(i),
                          descriptions_[i]))
                return;
        for (int i = 0; i < outputs; ++i)
            if (!AddOutput(ctx, pointers, i, output_shapes_[i], false)) return;
        Call(ctx, pointers);
    }
};

class D500BackwardKernel : public D500KernelBase {
 public:
    explicit D500BackwardKernel(OpKernelConstruction* c)
        : D500KernelBase(c, "backward_fn", "backward") {}

    void Compute(OpKernelContext* ctx) override {
        const int inputs = static_cast<int>(input_shapes_.size());
        const int outputs = static_cast<int>(output_shapes_.size());
        Pointers pointers;
        for (int i = 0; i < outputs; ++i)
            if (!AddInput(ctx, pointers, i, output_shapes_[i],
                          "output gradient " + std::to_string(i), descriptions_[inputs + i]))
                return;
        for (int i = 0; i < inputs; ++i)
            if (!AddInput(ctx, pointers, outputs + i, input_shapes_[i],
                          "forward input " + std::to_string(i), descriptions_[i]))
                return;
        for (int i = 0; i < outputs; ++i)
            if (!AddInput(ctx, pointers, outputs + inputs + i, output_shapes_[i],
                          "forward output " + std::to_string(i), descriptions_[inputs + i]))
                return;
        for (int i = 0; i < inputs; ++i)
            if (!AddOutput(ctx, pointers, i, input_shapes_[i], true)) return;
        Call(ctx, pointers);
    }
};

}  // namespace

// Both ops take the same attributes, so that the gradient copies the forward node's.
#define D500_ATTRS                                                                       \
    .Attr("Tin: list(type) >= 0")                                                        \
    .Attr("Tout: list(type) >= 1")                                                       \
    .Attr("input_shapes: list(shape) >= 0")                                              \
    .Attr("output_shapes: list(shape) >= 1")                                             \
    .Attr("handle: int")                                                                 \
    .Attr("instance: int")                                                               \
    .Attr("forward_fn: int")                                                             \
    .Attr("backward_fn: int")                                                            \
    .Attr("last_error_fn: int")                                                          \
    .Attr("op_name: string")                                                             \
    .Attr("descriptions: list(string)")                                                  \
    .SetIsStateful()

REGISTER_OP("D500CustomOp")
    .Input("inputs: Tin")
    .Output("outputs: Tout")
    D500_ATTRS
    .SetShapeFn([](InferenceContext* c) { return ShapesFromAttr(c, "output_shapes"); })
    .Doc("A Deep500 C++ operator's forward (d500_forward on the tensors' memory).");

REGISTER_OP("D500CustomOpGrad")
    .Input("output_grads: Tout")
    .Input("inputs: Tin")
    .Input("outputs: Tout")
    .Output("input_grads: Tin")
    D500_ATTRS
    .SetShapeFn([](InferenceContext* c) { return ShapesFromAttr(c, "input_shapes"); })
    .Doc("A Deep500 C++ operator's backward (d500_backward), zero-filled input grads.");

// Called by Python (ctypes) when an operator instance is first used in a graph, and
// when it is deleted.
extern "C" __attribute__((visibility("default"))) void d500_tf_register(int64_t handle,
                                                                        int64_t instance) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry.insert({handle, instance});
}

extern "C" __attribute__((visibility("default"))) void d500_tf_unregister(
        int64_t handle, int64_t instance) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry.erase({handle, instance});
}

REGISTER_KERNEL_BUILDER(Name("D500CustomOp").Device(tensorflow::DEVICE_CPU),
                        D500ForwardKernel);
REGISTER_KERNEL_BUILDER(Name("D500CustomOpGrad").Device(tensorflow::DEVICE_CPU),
                        D500BackwardKernel);
