import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            bls = pb_utils.InferenceRequest(
                model_name="py_decoupled",
                inputs=[pb_utils.Tensor("COUNT", count.astype(np.int32))],
                requested_output_names=["OUT", "WORD"])
            outs, words, final_only = [], [], 0
            for answer in bls.exec(decoupled=True):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is None:
                    final_only += 1
                    continue
                outs.append(int(out.as_numpy().reshape(-1)[0]))
                word = pb_utils.get_output_tensor_by_name(answer, "WORD").as_numpy()
                words.append(bytes(word.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array(outs, dtype=np.int32)),
                pb_utils.Tensor("WORDS", np.array(words, dtype=np.object_)),
                pb_utils.Tensor("FINAL_ONLY", np.array([final_only], dtype=np.int32))]))
        return responses
