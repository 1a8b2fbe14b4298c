#!/usr/bin/python3
"""phub.bucket_layout: where a DDP bucket's parameters lie in PhubState's flat buffers, against
hand-made layouts: offsets put the last parameter first, and a bucket is one slice only when its
parameters are back to back there in its order."""
import unittest

from phub.bucket_layout import consecutive_span, reverse_offsets


class LayoutTest(unittest.TestCase):
    def test_offsets_put_the_last_parameter_first(self):
        self.assertEqual(reverse_offsets([3, 5, 2]), [7, 2, 0])
        self.assertEqual(reverse_offsets([]), [])

    def test_spans_only_for_parameters_back_to_back_in_order(self):
        sizes = [3, 5, 2]
        offset = reverse_offsets(sizes)
        self.assertEqual(consecutive_span(offset, sizes, [2, 1, 0]), slice(0, 10))
        self.assertEqual(consecutive_span(offset, sizes, [1, 0]), slice(2, 10))
        self.assertEqual(consecutive_span(offset, sizes, [1]), slice(2, 7))
        # DDP's rebuilt order can put a layer's weight (1) before its bias (2): not one slice.
        self.assertIsNone(consecutive_span(offset, sizes, [0, 1]))
        self.assertIsNone(consecutive_span(offset, sizes, [1, 2]))
        self.assertIsNone(consecutive_span(offset, sizes, [2, 0]))  # a gap


if __name__ == "__main__":
    unittest.main()
