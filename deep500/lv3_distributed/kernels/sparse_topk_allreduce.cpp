// Sparse top-k allreduce as a Deep500 custom operator, after SparCML (Renggli, Alistarh,
// Aghagolzadeh & Hoefler, "SparCML: High-Performance Sparse Communication for Machine
// Learning", SC'19): each rank sends only its k largest-magnitude entries as
// (index, value) pairs, and every rank sums all ranks' pairs into a dense result.
//
//     forward(x, comm, k) -> (y, residual)
//         S_i     = the k entries of x_i largest in magnitude, on rank i
//         y       = sum_i S_i (x_i)            (times 1/p when AVERAGE=1)
//         residual = x - S(x)                  (this rank's entries that were not sent)
//
// x, y and residual are dense float or double tensors (DTYPE) of n elements; comm is an
// int64 tensor of one element, the communicator's Fortran handle (mpi_common.h), and k
// an int64 tensor of one element, 0 <= k <= n, the same on every rank (MPI_Allgather
// needs equal counts). The residual is what error feedback adds to the next step's
// gradient (Lin et al., "Deep Gradient Compression", ICLR 2018; Renggli et al. 2019).
//
// Selection: by |x|, larger first; NaN counts as an infinite magnitude, so that it is
// sent and shows up in y; equal magnitudes go to the lower index, so the selected set
// is deterministic. It costs O(n): std::nth_element on a copy of the magnitudes finds
// the k-th largest, then one pass takes every entry above it and, by increasing index,
// as many entries equal to it as still fit.
//
// Exchange: one MPI_Allgather of k packed records of (int64 index, DTYPE value), i.e.
// k * (8 + sizeof(DTYPE)) bytes from every rank. Every rank then adds the p blocks into
// y in rank order, so every rank computes a bit-identical y (the scheme using it is
// consistent). The dense result is the simple variant of SparCML's sparse allreduce
// (allgather of sparse blocks, then a local dense sum); it pays p * k records per rank,
// so it pays off while p * k stays well below n.
//
// Backward, for the objective L = sum_j L_j of all ranks (as mpi_allreduce.cpp): y_j
// depends on x_k through rank k's selection mask m_k (constant almost everywhere), and
// the residual only on the own x, with Jacobian 1 - m_k:
//
//     dL/dx_k = m_k * sum_j g_y,j (times 1/p) + (1 - m_k) * g_residual,k
//
// The mask is recomputed from the forward input (the operator keeps no per-call state).
// comm and k have no gradient.
//
// Compile definitions: AVERAGE (default 0), DTYPE (from Deep500: float or double).
#include <deep500/deep500.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "mpi_common.h"

#ifndef AVERAGE
#define AVERAGE 0
#endif

template <typename T>
class SparseTopKAllreduce : public deep500::CustomOperator {
 public:
    static constexpr int kRecord = static_cast<int>(sizeof(int64_t) + sizeof(T));

    explicit SparseTopKAllreduce(int64_t count) : count_(count), magnitudes_(count) {}

    void forward(const T* x, const int64_t* comm, const int64_t* k, T* y, T* residual) {
        const MPI_Comm c = start(comm);
        const int64_t selected = select(x, k);
        gather_records(x, selected, c);
        std::fill(y, y + count_, T(0));
        for (const unsigned char* record = gathered_.data();
             record != gathered_.data() + gathered_.size(); record += kRecord) {
            int64_t index;
            T value;
            std::memcpy(&index, record, sizeof(index));
            std::memcpy(&value, record + sizeof(index), sizeof(value));
            y[index] += value;
        }
        if (AVERAGE) scale(y, c);
        std::copy(x, x + count_, residual);
        for (int64_t i = 0; i < selected; ++i) residual[selected_[i]] = T(0);
    }

    void backward(const T* y_grad, const T* residual_grad, const T* x, const int64_t* comm,
                  const int64_t* k, const T* y, const T* residual, T* x_grad,
                  int64_t* comm_grad, int64_t* k_grad) {
        (void)y;
        (void)residual;
        (void)comm_grad;
        (void)k_grad;
        const MPI_Comm c = start(comm);
        // Every rank's y_j depends on this rank's sent entries: sum g_y over the ranks.
        d500mpi::check(MPI_Allreduce(y_grad, x_grad, d500mpi::count_of(count_, kName),
                                     d500mpi::datatype<T>(), MPI_SUM, c),
                       kName, "MPI_Allreduce");
        if (AVERAGE) scale(x_grad, c);
        const int64_t selected = select(x, k);
        mask_.assign(count_, 0);
        for (int64_t i = 0; i < selected; ++i) mask_[selected_[i]] = 1;
        for (int64_t i = 0; i < count_; ++i)
            if (!mask_[i]) x_grad[i] = residual_grad[i];
    }

 private:
    static constexpr const char* kName = "sparse_topk_allreduce";

    MPI_Comm start(const int64_t* comm) const {
        d500mpi::require_running(kName);
        return d500mpi::communicator(comm, kName);
    }

    static T magnitude(T value) {
        return std::isnan(value) ? std::numeric_limits<T>::infinity() : std::fabs(value);
    }

    // Fills selected_ with the indices of the k selected entries; returns k.
    int64_t select(const T* x, const int64_t* k) {
        const int64_t selected = k[0];
        if (selected < 0 || selected > count_)
            throw std::invalid_argument(std::string(kName) + ": k = " +
                                        std::to_string(selected) + " is outside [0, " +
                                        std::to_string(count_) + "]");
        selected_.resize(selected);
        if (selected == count_) {
            std::iota(selected_.begin(), selected_.end(), int64_t(0));
            return selected;
        }
        if (selected == 0) return 0;
        for (int64_t i = 0; i < count_; ++i) magnitudes_[i] = magnitude(x[i]);
        std::nth_element(magnitudes_.begin(), magnitudes_.begin() + (selected - 1),
                         magnitudes_.end(), std::greater<T>());
        const T threshold = magnitudes_[selected - 1];
        // Entries before the k-th are >= threshold: those above it are all taken.
        int64_t ties = selected;
        for (int64_t i = 0; i < selected - 1; ++i)
            if (magnitudes_[i] > threshold) --ties;
        int64_t taken = 0;
        for (int64_t i = 0; i < count_ && taken < selected; ++i) {
            const T m = magnitude(x[i]);
            if (m > threshold || (m == threshold && ties-- > 0)) selected_[taken++] = i;
        }
        return selected;
    }

    void gather_records(const T* x, int64_t selected, MPI_Comm comm) {
        int size = 1;
        d500mpi::check(MPI_Comm_size(comm, &size), kName, "MPI_Comm_size");
        const int block = d500mpi::count_of(selected * kRecord, kName);
        d500mpi::count_of(static_cast<int64_t>(block) * size, kName);
        records_.resize(block);
        for (int64_t i = 0; i < selected; ++i) {
            const int64_t index = selected_[i];
            std::memcpy(records_.data() + i * kRecord, &index, sizeof(index));
            std::memcpy(records_.data() + i * kRecord + sizeof(index), x + index, sizeof(T));
        }
        gathered_.resize(static_cast<size_t>(block) * size);
        d500mpi::check(MPI_Allgather(records_.data(), block, MPI_BYTE, gathered_.data(), block,
                                     MPI_BYTE, comm),
                       kName, "MPI_Allgather");
    }

    void scale(T* values, MPI_Comm comm) const {
        int size = 1;
        d500mpi::check(MPI_Comm_size(comm, &size), kName, "MPI_Comm_size");
        const T divisor = T(size);
        for (int64_t i = 0; i < count_; ++i) values[i] /= divisor;
    }

    int64_t count_;
    // Scratch reused between calls (sizes only; no value carries over).
    std::vector<T> magnitudes_;
    std::vector<int64_t> selected_;
    std::vector<unsigned char> records_, gathered_, mask_;
};

D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int ninputs,
                                  deep500::tensor_t* outputs, int noutputs) {
    if (ninputs != 3 || noutputs != 2)
        throw std::invalid_argument(
            "sparse_topk_allreduce takes (x, comm, k) and gives (y, residual)");
    const int64_t count = deep500::num_elements(inputs[0]);
    if (deep500::num_elements(outputs[0]) != count ||
        deep500::num_elements(outputs[1]) != count)
        throw std::invalid_argument(
            "sparse_topk_allreduce: y and residual must have as many elements as x");
    if (deep500::num_elements(inputs[1]) != 1 || deep500::num_elements(inputs[2]) != 1)
        throw std::invalid_argument(
            "sparse_topk_allreduce: comm and k are one int64 each");
    d500mpi::require_running("sparse_topk_allreduce");
    return new SparseTopKAllreduce<DTYPE>(count);
}

D500_REGISTER_OP(SparseTopKAllreduce<DTYPE>);
