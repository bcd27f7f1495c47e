// What the MPI operators of Deep500 share: the communicator handle they are given, the
// MPI datatype of an element type, and MPI errors turned into C++ exceptions (which
// reach Python as d5.CppOperatorError with the message).
//
// The communicator arrives as an int64 input tensor of one element holding its Fortran
// handle (mpi4py: comm.py2f()); MPI_Comm_f2c turns it back into this library's
// MPI_Comm. A Fortran handle is an integer in every MPI (an MPI_Comm is an int in MPICH
// and a pointer in Open MPI), so the same source works with both, and the operator is
// not tied to MPI_COMM_WORLD: a scheme passes its own duplicate, a test a split one.
// It is an input rather than a compile definition because handles of duplicated
// communicators differ between runs (and may differ between ranks), and the compiled
// library is cached and shared by every rank.
#ifndef DEEP500_LV3_MPI_COMMON_H
#define DEEP500_LV3_MPI_COMMON_H

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace d500mpi {

template <typename T> MPI_Datatype datatype();
template <> inline MPI_Datatype datatype<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype datatype<double>() { return MPI_DOUBLE; }

inline void check(int code, const char* op, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    throw std::runtime_error(std::string(op) + ": " + call + " failed on world rank " +
                             std::to_string(rank) + ": " + std::string(text, length));
}

// MPI must already be running in this process, initialised by mpi4py through the very
// libmpi this library links. A library linked against another libmpi would see its
// own, uninitialised MPI here, which is how a toolchain mismatch shows up.
inline void require_running(const char* op) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        throw std::runtime_error(
            std::string(op) + ": MPI is " + (finalized ? "finalized" : "not initialized") +
            " in the libmpi this operator links. Import mpi4py.MPI (or construct a "
            "d5.CommunicationNetwork) before calling it, and build it with "
            "deep500.lv3_distributed.mpi_toolchain, which links the libmpi mpi4py loaded");
}

inline MPI_Comm communicator(const int64_t* handle, const char* op) {
    MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle[0]));
    if (comm == MPI_COMM_NULL)
        throw std::invalid_argument(std::string(op) + ": the communicator is MPI_COMM_NULL");
    return comm;
}

inline int count_of(int64_t count, const char* op) {
    if (count > INT_MAX)
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(count) +
                                    " elements exceed MPI's int count; split the buffer");
    return static_cast<int>(count);
}

}  // namespace d500mpi

#endif  // DEEP500_LV3_MPI_COMMON_H
