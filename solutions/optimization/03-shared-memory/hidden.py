"""Hidden grading cases for 03-shared-memory: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case, public_spec

VECTOR_SUM = public_spec("optimization/03-shared-memory", "vector_sum")

CASES = [
    Case({"shape": (1, 2)}, label="two elements"),
    Case({"shape": (7, 4095)}, torch.float16, label="one short of a power of two"),
    Case({"shape": (3, 8191), "scale": 100.0}, label="large values, just below the limit"),
    Case({"shape": (2, 16385)}, label="long rows, a partial last chunk"),
    Case({"shape": (20, 33), "layout": "transposed", "minus_inf": True}, label="x a transpose, -inf entries"),
    Case({"shape": (2, 12289), "offset": -300.0}, torch.float16, label="long rows, every value near -300"),
    Case({"shape": (1024, 8192)}, torch.float16, label="large", cuda_only=True),
    Case({"n": 2}, spec=VECTOR_SUM, label="two elements"),
    Case({"n": 8191}, torch.float16, spec=VECTOR_SUM, label="one short of two chunks"),
    Case({"n": 12_289, "layout": "strided"}, spec=VECTOR_SUM, label="every other element, three chunks"),
    Case({"n": 65_536}, spec=VECTOR_SUM, label="sixteen chunks exactly"),
    Case({"n": 16_385, "values": "cancelling"}, torch.bfloat16, spec=VECTOR_SUM,
         label="large values that cancel, a partial last chunk"),
    Case({"n": (1 << 26) - 1}, torch.float16, spec=VECTOR_SUM, label="large", cuda_only=True),
]
