import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def attempt(fn, *args, **kwargs):
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001 - the test reads the type and the text
        return {"raised": type(e).__name__, "message": str(e)}


def wait_ready(target, want, timeout=15.0):
    deadline = time.monotonic() + timeout
    while pb_utils.is_model_ready(target) != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "py_ctl_target")
            steps = [
                ["ready", attempt(pb_utils.is_model_ready, target)],
                ["ready_v1", attempt(pb_utils.is_model_ready, target, "1")],
                ["ready_v7", attempt(pb_utils.is_model_ready, target, "7")],
                ["ready_bad_version", attempt(pb_utils.is_model_ready, target, "one")],
                ["unload", attempt(pb_utils.unload_model, target)],
                ["not_ready_after_unload", wait_ready(target, False)],
                ["load", attempt(pb_utils.load_model, target)],
                ["ready_after_load", wait_ready(target, True)],
                ["load_missing", attempt(pb_utils.load_model, "no_such_model_ctl")],
                ["ready_missing", attempt(pb_utils.is_model_ready, "no_such_model_ctl")],
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("STEPS", np.array([json.dumps(steps).encode()],
                                                  dtype=np.object_))]))
        return responses
