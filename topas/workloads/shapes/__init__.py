"""The workflow-shape family: a seeded generator of multi-agent workflow shapes (docs/workloads.md).

    python run.py workload=shapes workload.params.shape=e7 workload.load=0.8 scheduler=topas
    python -m topas.workloads shapes --list 6 --sample design          # describe and draw a few shapes

`structures.py` builds a shape's stages, `spec.py` sizes its prefixes and call lengths, `catalog.py`
names the design and evaluation samples, `generator.py` is the `shapes` workload generator.
"""

from topas.workloads.shapes.catalog import SAMPLES, parse_id, sample_ids, workload_name
from topas.workloads.shapes.generator import ShapesGenerator
from topas.workloads.shapes.spec import REFERENCE_POOL, ShapeSpec, shape_spec
from topas.workloads.shapes.structures import STRUCTURES

__all__ = ["REFERENCE_POOL", "SAMPLES", "STRUCTURES", "ShapeSpec", "ShapesGenerator", "parse_id", "sample_ids",
           "shape_spec", "workload_name"]
