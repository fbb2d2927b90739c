"""Doubles INPUT0 and says which process served it; INPUT0[0] == -9 kills that process
(os.kill(os.getpid(), 9)) inside execute, as a crashing model would, INPUT0[0] == -11 reads
address 0 (a real SIGSEGV, as a faulty native extension would), and INPUT0[0] == -7 hangs in
execute (time.sleep(3600)), as a deadlocked one would. is_ready() is False when the config's
parameters have PID_NOT_READY (test_python_stub.py sets it on one copy)."""

import ctypes
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.not_ready = '"PID_NOT_READY"' in args["model_config"]

    def is_ready(self):
        return not self.not_ready

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.size and x.reshape(-1)[0] == -9:
                os.kill(os.getpid(), 9)
            if x.size and x.reshape(-1)[0] == -11:
                ctypes.string_at(0)
            if x.size and x.reshape(-1)[0] == -7:
                time.sleep(3600)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (x * 2).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", np.array([os.getpid()], dtype=np.int64)),
            ]))
        return responses
