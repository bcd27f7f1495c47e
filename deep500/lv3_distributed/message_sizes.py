"""Message-size histograms: how many messages of which size a rank sent, and their bytes.

A distributed training run sends messages of a few characteristic sizes (a ring's
chunks, a tree's whole buffers, zero-byte barrier messages); A. Catalán's thesis (Fig.
5.13) plots their distribution to show which of the network's regimes (latency- or
bandwidth-bound) a scheme lives in. ``MessageSizeHistogram`` keeps that distribution
for one rank at a constant cost: power-of-two bins, each with a message count and a
byte count, so it never grows with the number of messages.

Bins: bin 0 holds zero-byte messages; bin k >= 1 holds sizes from 2^(k-1) to 2^k - 1
bytes (``int.bit_length``), e.g. bin 13 holds 4096..8191 B. Messages whose sizes are
not known one by one (a model that states only a call's totals, with more than one
message) are kept apart as ``unsized``, so that the histogram's totals always equal
the volume's ``bytes_sent`` and ``messages_sent``.
"""
from __future__ import annotations

UNSIZED = "unsized"


def size_bin(nbytes: int) -> int:
    """The bin of a message of ``nbytes`` bytes (module docstring)."""
    return int(nbytes).bit_length()


def bin_bounds(index: int) -> tuple[int, int]:
    """(smallest, largest) message size in bytes that bin ``index`` holds."""
    if index == 0:
        return 0, 0
    return 1 << (index - 1), (1 << index) - 1


def _size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def bin_label(index: int) -> str:
    """A bin's sizes for a plot axis: ``"0 B"``, ``"1 B"``, ``"4 KiB-8 KiB"`` (upper end
    exclusive)."""
    if index <= 1:
        return f"{index} B"
    low, high = bin_bounds(index)
    return f"{_size_text(low)}-{_size_text(high + 1)}"


class MessageSizeHistogram:
    """Messages sent by one rank, by power-of-two size bin: ``{bin: [messages, bytes]}``
    plus the ``unsized`` messages (module docstring). Adding a message is a
    ``bit_length``, a dictionary lookup and two additions."""
    __slots__ = ("_bins",)

    def __init__(self):
        self._bins: dict = {}

    def add(self, nbytes: int, messages: int = 1) -> None:
        """``messages`` messages of ``nbytes`` bytes each."""
        if messages:
            key = int(nbytes).bit_length()
            counts = self._bins.get(key)
            if counts is None:
                counts = self._bins[key] = [0, 0]
            counts[0] += messages
            counts[1] += nbytes * messages

    def add_unsized(self, nbytes: int, messages: int) -> None:
        """``messages`` messages of ``nbytes`` bytes in all, sizes unknown one by one."""
        if messages or nbytes:
            counts = self._bins.setdefault(UNSIZED, [0, 0])
            counts[0] += messages
            counts[1] += nbytes

    def add_sizes(self, sizes) -> None:
        """Every ``(nbytes, messages)`` pair of ``sizes``."""
        for nbytes, messages in sizes:
            self.add(nbytes, messages)

    def merge(self, other: "MessageSizeHistogram") -> None:
        """Add ``other``'s messages to this histogram."""
        for key, (messages, nbytes) in other._bins.items():
            counts = self._bins.setdefault(key, [0, 0])
            counts[0] += messages
            counts[1] += nbytes

    def clear(self) -> None:
        self._bins.clear()

    def copy(self) -> "MessageSizeHistogram":
        twin = MessageSizeHistogram()
        twin._bins = {key: list(counts) for key, counts in self._bins.items()}
        return twin

    def __sub__(self, earlier: "MessageSizeHistogram") -> "MessageSizeHistogram":
        """What was added since ``earlier`` (a ``copy()`` taken before)."""
        difference = MessageSizeHistogram()
        for key, (messages, nbytes) in self._bins.items():
            before = earlier._bins.get(key, (0, 0))
            if messages - before[0] or nbytes - before[1]:
                difference._bins[key] = [messages - before[0], nbytes - before[1]]
        return difference

    @property
    def messages(self) -> int:
        return sum(counts[0] for counts in self._bins.values())

    @property
    def bytes(self) -> int:
        return sum(counts[1] for counts in self._bins.values())

    def bins(self) -> dict[int, tuple[int, int]]:
        """``{bin: (messages, bytes)}`` of the sized messages, by increasing bin."""
        return {key: tuple(self._bins[key]) for key in
                sorted(k for k in self._bins if k != UNSIZED)}

    def to_dict(self) -> dict:
        """JSON form: ``bins`` (one row per non-empty bin: ``bin``, ``low``, ``high``
        bytes, ``messages``, ``bytes``), ``unsized_messages``, ``unsized_bytes``,
        ``messages`` and ``bytes`` (all messages)."""
        rows = []
        for key, (messages, nbytes) in self.bins().items():
            low, high = bin_bounds(key)
            rows.append({"bin": key, "low": low, "high": high, "messages": messages,
                         "bytes": nbytes})
        unsized = self._bins.get(UNSIZED, (0, 0))
        return {"binning": "power of two", "bins": rows,
                "unsized_messages": unsized[0], "unsized_bytes": unsized[1],
                "messages": self.messages, "bytes": self.bytes}

    @classmethod
    def from_dict(cls, data: dict) -> "MessageSizeHistogram":
        """The histogram of a ``to_dict()``."""
        histogram = cls()
        for row in data.get("bins") or []:
            histogram._bins[int(row["bin"])] = [int(row["messages"]), int(row["bytes"])]
        if data.get("unsized_messages") or data.get("unsized_bytes"):
            histogram._bins[UNSIZED] = [int(data.get("unsized_messages") or 0),
                                        int(data.get("unsized_bytes") or 0)]
        return histogram

    def __repr__(self) -> str:
        return (f"MessageSizeHistogram({self.messages} messages, {self.bytes} B, "
                f"{len(self._bins)} bins)")
