import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            calls = [pb_utils.InferenceRequest(model_name=name,
                                               inputs=[pb_utils.Tensor("INPUT0", x)],
                                               requested_output_names=["OUTPUT0"]).async_exec()
                     for name in ("bls_identity", "py_add_one")]
            answers = await asyncio.gather(*calls)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            outs = [pb_utils.get_output_tensor_by_name(a, "OUTPUT0").as_numpy() for a in answers]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT_IDENTITY", outs[0]),
                pb_utils.Tensor("OUT_ADD_ONE", outs[1])]))
        return responses
