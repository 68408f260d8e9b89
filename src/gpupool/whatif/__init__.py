"""`gpupool what-if`: run scenario files through the scheduling core in simulated time.

A scenario (format v1, see docs) is a small cluster, its projects and workloads, an optional
timeline and expectations. `load_scenario` checks a file and builds core objects;
`run_scenario` runs it on the simulated cluster (`gpupool.simcluster`) and checks the
expectations (`checks`).
"""

from gpupool.whatif.loader import ScenarioError, load_scenario, load_scenario_text
from gpupool.whatif.runner import RunResult, State, run_scenario
from gpupool.whatif.scenario import Scenario

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "State",
    "load_scenario",
    "load_scenario_text",
    "run_scenario",
]
