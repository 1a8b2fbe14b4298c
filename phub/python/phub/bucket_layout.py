"""Where a DDP bucket's parameters lie in PhubState's flat buffers (the answers; on a GPU also
the gradients' staging): parameter i at offset[i], sizes[i] elements, the last parameter first.
A bucket whose parameters lie back to back there, in its order, is one slice of the buffers;
else its answer is gathered (PhubState._averaged). DDP rebuilds its buckets after the first
iteration in the order the gradients became ready, which is not always that layout: torch 1.13
put a convolution's weight before its bias, where the layout has the bias first (seen with
gloo, one rank)."""
from typing import List, Optional, Sequence


def reverse_offsets(sizes: Sequence[int]) -> List[int]:
    """Each parameter's offset in the flat buffers: the last parameter first."""
    offset, at = [0] * len(sizes), 0
    for i in reversed(range(len(sizes))):
        offset[i] = at
        at += sizes[i]
    return offset


def consecutive_span(offset: Sequence[int], sizes: Sequence[int],
                     ids: Sequence[int]) -> Optional[slice]:
    """The flat buffers' slice holding parameters `ids` in that order, back to back; else
    None."""
    for a, b in zip(ids, ids[1:]):
        if offset[a] + sizes[a] != offset[b]:
            return None
    first = offset[ids[0]]
    return slice(first, first + sum(sizes[i] for i in ids))
