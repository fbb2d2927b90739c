import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()

            def call(**trace):
                r = pb_utils.InferenceRequest(
                    model_name="echo", requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", x)], **trace).exec()
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
                return pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()

            traced = call(trace=request.trace())
            call()  # no trace given: Triton does not trace it
            context = request.trace().get_context()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", traced),
                pb_utils.Tensor("CONTEXT", np.array([context or ""], dtype=object))]))
        return responses
