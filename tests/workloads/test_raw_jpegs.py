"""The reader side of `decode: gpu` (workloads/raw_jpegs.py): a batch packed into one tensor
unpacks to the same files' bytes, boxes, flips and labels, unreadable files included."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from wattlife.workloads.raw_jpegs import collate_raw, pack_raw, unpack_raw

item = st.tuples(st.one_of(st.none(), st.binary(min_size=1, max_size=64)),
                 st.tuples(*[st.integers(0, 500)] * 4), st.booleans(), st.integers(0, 999))


@given(st.lists(item, min_size=1, max_size=12))
def test_a_packed_batch_unpacks_to_the_same_items(batch):
    packed = pack_raw(batch)
    buf, sizes = packed[0], packed[1]
    assert buf.dtype == torch.uint8 and buf.numel() == sum(len(r[0] or b"") for r in batch)
    assert sizes == [0 if r[0] is None else len(r[0]) for r in batch]
    back = unpack_raw(packed)
    assert [(None if d is None else bytes(d), b, f, y) for d, b, f, y in back] == batch


def test_a_list_batch_passes_through_unpack():
    batch = [(b"\xff\xd8", (0, 0, 1, 1), False, 3), (None, (0, 0, 0, 0), False, 1)]
    assert unpack_raw(collate_raw(batch)) is batch
