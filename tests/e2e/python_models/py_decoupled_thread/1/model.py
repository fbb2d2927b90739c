import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            returned = threading.Event()
            thread = threading.Thread(target=self._respond,
                                      args=(request.get_response_sender(), count, returned),
                                      daemon=True)
            thread.start()
            self.threads.append((thread, returned))
        for _, returned in self.threads:
            returned.set()
        self.threads = [(t, r) for t, r in self.threads if t.is_alive()]
        return None

    def _respond(self, sender, count, returned):
        returned.wait(5)
        time.sleep(0.05)
        for i in range(count):
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([100 + i], dtype=np.int32)),
                pb_utils.Tensor("AFTER_RETURN", np.array([returned.is_set()], dtype=np.bool_)),
            ]))
            time.sleep(0.01)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread, _ in self.threads:
            thread.join(5)
