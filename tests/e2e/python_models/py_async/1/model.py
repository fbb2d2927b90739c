import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.02)
        running = asyncio.get_running_loop().is_running()
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            await asyncio.sleep(0)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", (x * 3).astype(np.int64)),
                pb_utils.Tensor("LOOP_RUNNING", np.array([running], dtype=np.bool_))]))
        return responses
