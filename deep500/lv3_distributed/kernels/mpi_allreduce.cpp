// Allreduce as a Deep500 custom operator: MPI_Allreduce straight on the tensors' memory.
//
//     forward(x, comm) -> y,  y = sum_i x_i over the ranks i of comm   (AVERAGE=0)
//                             y = (1/p) sum_i x_i                      (AVERAGE=1)
//
// x and y are dense tensors of float or double (DTYPE) of any shape, the same on every
// rank; comm is an int64 tensor of one element, the communicator's Fortran handle
// (mpi_common.h says why). Every rank of comm must call forward (and backward) together.
//
// Backward. Each rank j holds y_j = sum_i x_i (scaled by 1/p when averaging), the same
// value everywhere, and a gradient g_j = dL_j/dy_j of its own objective L_j. The
// objective of data-parallel training is the sum of the ranks' objectives, L = sum_j L_j,
// and x_k enters every y_j with the identity Jacobian (times 1/p), so
//
//     dL/dx_k = sum_j (dy_j/dx_k)^T g_j = sum_j g_j          (times 1/p when averaging)
//
// on every rank k: the backward of an allreduce is the same allreduce of the incoming
// gradients. (A finite-difference check on one rank sees only dL_k/dx_k = g_k, which is
// why the tests compare backward with the NumPy sum of all ranks' g_j instead.) The
// communicator input has no gradient; its gradient buffer is left untouched.
//
// Compile definitions: AVERAGE (default 0), DTYPE (from Deep500: float or double).
// Build it with deep500.lv3_distributed.mpi_toolchain, which adds MPI's headers and
// links the libmpi that mpi4py loaded into the process.
#include <deep500/deep500.h>

#include "mpi_common.h"

#ifndef AVERAGE
#define AVERAGE 0
#endif

template <typename T>
class MPIAllreduce : public deep500::CustomOperator {
 public:
    explicit MPIAllreduce(int64_t count) : count_(d500mpi::count_of(count, kName)) {}

    void forward(const T* x, const int64_t* comm, T* y) { allreduce(x, comm, y); }

    void backward(const T* next_grad, const T* x, const int64_t* comm, const T* y,
                  T* x_grad, int64_t* comm_grad) {
        (void)x;
        (void)y;
        (void)comm_grad;
        allreduce(next_grad, comm, x_grad);
    }

 private:
    static constexpr const char* kName = "mpi_allreduce";

    void allreduce(const T* in, const int64_t* handle, T* out) const {
        d500mpi::require_running(kName);
        MPI_Comm comm = d500mpi::communicator(handle, kName);
        d500mpi::check(MPI_Allreduce(in, out, count_, d500mpi::datatype<T>(), MPI_SUM, comm),
                       kName, "MPI_Allreduce");
        if (AVERAGE) {
            int size = 1;
            d500mpi::check(MPI_Comm_size(comm, &size), kName, "MPI_Comm_size");
            const T divisor = T(size);  // divided, not times 1/p, as CommunicationNetwork
            for (int i = 0; i < count_; ++i) out[i] /= divisor;
        }
    }

    int count_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    if (ninputs != 2 || noutputs != 1)
        throw std::invalid_argument("mpi_allreduce takes (x, comm) and gives y");
    const int64_t count = deep500::num_elements(inputs[0]);
    if (deep500::num_elements(outputs[0]) != count)
        throw std::invalid_argument("mpi_allreduce: y must have as many elements as x");
    if (deep500::num_elements(inputs[1]) != 1)
        throw std::invalid_argument("mpi_allreduce: comm is one int64 (a Fortran handle)");
    d500mpi::require_running("mpi_allreduce");
    return new MPIAllreduce<DTYPE>(count);
}

D500_REGISTER_OP(MPIAllreduce<DTYPE>);
