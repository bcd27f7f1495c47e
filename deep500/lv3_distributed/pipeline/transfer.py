"""Point-to-point transfers between neighbouring pipeline stages.

A stage sends each boundary tensor of a microbatch as one message of exactly its bytes
(``MPI_Isend`` of the contiguous array, counted by the
:class:`~deep500.lv3_distributed.communication.CommunicationNetwork`), activations to
the next stage and their gradients to the previous one; the receiver knows every
shape in advance (:class:`~deep500.lv3_distributed.pipeline.stage_split.BoundaryTensor`),
so no size travels with them. Messages of one direction between two ranks are matched
in order (MPI-4.0 §3.5, non-overtaking), one tag per direction.

Sends are non-blocking and completed at the end of the step (:meth:`StageLinks.wait`):
with blocking sends, 1F1B's neighbours could each wait in a send to the other.
"""
from __future__ import annotations

import numpy as np

ACTIVATION_TAG, GRADIENT_TAG = 60, 61


class StageLinks:
    """The links of stage ``stage`` to its neighbours in ``comm`` (a
    CommunicationNetwork whose rank ``s`` runs stage ``s``)."""

    def __init__(self, comm, stage: int, stages: int):
        self.comm, self.stage, self.stages = comm, stage, stages
        self._pending = []     # (request, array kept alive until sent)

    def send_activations(self, tensors, arrays: dict) -> None:
        self._send(tensors, arrays, self.stage + 1, ACTIVATION_TAG)

    def send_gradients(self, tensors, arrays: dict) -> None:
        self._send(tensors, arrays, self.stage - 1, GRADIENT_TAG)

    def receive_activations(self, tensors, batch: int) -> dict:
        return self._receive(tensors, batch, self.stage - 1, ACTIVATION_TAG)

    def receive_gradients(self, tensors, batch: int) -> dict:
        return self._receive(tensors, batch, self.stage + 1, GRADIENT_TAG)

    def wait(self) -> None:
        """Complete every send of this step."""
        for request, _ in self._pending:
            request.wait()
        self._pending = []

    def _send(self, tensors, arrays, dest, tag) -> None:
        for tensor in tensors:
            array = np.ascontiguousarray(arrays[tensor.name], dtype=tensor.dtype)
            self._pending.append((self.comm.isend(array, dest, tag), array))

    def _receive(self, tensors, batch, source, tag) -> dict:
        return {t.name: self.comm.recv(np.empty(t.shape_for(batch), t.dtype), source, tag)
                for t in tensors}
