"""The MPI tags of Deep500's own messages, in one table so that no two collectives share
one.

Deep500's collectives send on a duplicate of the user's communicator
(``CommunicationNetwork._own``), so their messages never match a user's receive; among
themselves they are told apart by these tags (MPI matches a receive by source, tag and
communicator, MPI-4.0 section 3.5).
"""

# CommunicationNetwork's rooted collectives and neighbour exchanges
BROADCAST, GATHER, SCATTER = 3, 4, 5
TO_RIGHT, TO_LEFT = 6, 7
TO_SOUTH, TO_NORTH, TO_EAST, TO_WEST = 8, 9, 10, 11

# the allreduce algorithms of deep500.lv3_distributed.collectives
RING_REDUCE_SCATTER, RING_ALLGATHER = 1, 2
LINEAR_REDUCE, LINEAR_BROADCAST = 12, 13
BINOMIAL_REDUCE, BINOMIAL_BROADCAST = 14, 15
FOLD, UNFOLD, EXCHANGE = 16, 17, 18
HALVING, DOUBLING = 19, 20
SEGMENT_REDUCE_SCATTER, SEGMENT_ALLGATHER = 21, 22
NARROWED_REDUCE_SCATTER, NARROWED_ALLGATHER = 23, 24
NARROWED_FOLD, NARROWED_UNFOLD, NARROWED_EXCHANGE = 25, 26, 27
NARROWED_LINEAR_REDUCE, NARROWED_LINEAR_BROADCAST = 28, 29
NARROWED_BINOMIAL_REDUCE, NARROWED_BINOMIAL_BROADCAST = 30, 31
NARROWED_HALVING, NARROWED_DOUBLING = 32, 33
NARROWED_SEGMENT_REDUCE_SCATTER, NARROWED_SEGMENT_ALLGATHER = 34, 35

# the overlapped neighbour and parameter-server schemes' bucket exchanges
# (lv3_distributed.bucket_requests): one tag per neighbour direction, one for the gather
BUCKET_TO_RIGHT, BUCKET_TO_LEFT = 40, 41
BUCKET_TO_SOUTH, BUCKET_TO_NORTH, BUCKET_TO_EAST, BUCKET_TO_WEST = 42, 43, 44, 45
BUCKET_GATHER = 46

# the non-blocking ring (collectives.ring_request): one tag per outstanding request,
# taken in turn from this range
NONBLOCKING_RING_FIRST, NONBLOCKING_RING_TAGS = 1000, 4096
