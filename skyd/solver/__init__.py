"""Placement solver: candidates from catalogs, chain DP / HiGHS ILP, ranked plans.

Pure functions, no I/O. highspy is imported only when a non-chain DAG needs the ILP.
"""

from skyd.solver.candidates import Candidate, enumerate_task
from skyd.solver.costs import register_runtime_estimator, unregister_runtime_estimator
from skyd.solver.listing import gpu_listing
from skyd.solver.optimize import optimize, optimize_async
from skyd.solver.plan import Choice, Plan, TaskPlan, format_plan_table, plan_to_json
from skyd.solver.request import Block, DagRequest, ResourceRequest, TaskRequest

__all__ = [
    "register_runtime_estimator",
    "unregister_runtime_estimator",
    "Block",
    "Candidate",
    "Choice",
    "DagRequest",
    "Plan",
    "ResourceRequest",
    "TaskPlan",
    "TaskRequest",
    "enumerate_task",
    "format_plan_table",
    "gpu_listing",
    "optimize",
    "optimize_async",
    "plan_to_json",
]
