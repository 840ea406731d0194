"""Name -> pure advantage function, as in verl's core_algos: `get_estimator("grpo")` is `rl.advantages.grpo`.

Only the tensor maths lives in this package (it imports nothing else of credo). How a method's flags and batch
map onto its function is the method's own module, rl/methods/<name>.py.
"""
ADVANTAGE_ESTIMATORS = {}


def register(name: str):
    def wrap(fn):
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn
    return wrap


def get_estimator(name: str):
    if name not in ADVANTAGE_ESTIMATORS:
        raise KeyError(f"no advantage estimator named {name!r}; built: {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]
