import numpy as np
import triton_python_backend_utils as pb_utils
import util


class TritonPythonModel:
    def execute(self, requests):
        text = ("%s|%s" % (util.CONSTANT, util.describe())).encode()
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("WHICH", np.array([text], dtype=np.object_))]) for _ in requests]
