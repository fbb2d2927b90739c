import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _raises(fn):
    try:
        fn()
    except pb_utils.TritonModelException as e:
        return {"raised": True, "type": type(e).__name__, "message": str(e)}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "type": type(e).__name__, "message": str(e),
                "not_model_exception": True}
    return {"raised": False}


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "test": "e2e"}
        self.counter_family = pb_utils.MetricFamily(
            name="py_e2e_requests_total", description="Sum of the inputs seen",
            kind=pb_utils.MetricFamily.COUNTER)
        self.gauge_family = pb_utils.MetricFamily(
            name="py_e2e_last_input", description="The last input",
            kind=pb_utils.MetricFamily.GAUGE)
        self.histogram_family = pb_utils.MetricFamily(
            name="py_e2e_input_histogram", description="The inputs",
            kind=pb_utils.MetricFamily.HISTOGRAM)
        self.counter = self.counter_family.Metric(labels=labels)
        self.gauge = self.gauge_family.Metric(labels=labels)
        self.histogram = self.histogram_family.Metric(labels=labels, buckets=[1.0, 5.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.counter.increment(value)
            self.gauge.set(value)
            self.histogram.observe(value)
            misuse = {
                "counter_negative_increment": _raises(lambda: self.counter.increment(-1.0)),
                "counter_set": _raises(lambda: self.counter.set(3.0)),
                "counter_observe": _raises(lambda: self.counter.observe(1.0)),
                "gauge_observe": _raises(lambda: self.gauge.observe(1.0)),
                "histogram_value": _raises(lambda: self.histogram.value()),
                "histogram_increment": _raises(lambda: self.histogram.increment(1.0)),
                "histogram_set": _raises(lambda: self.histogram.set(1.0)),
            }
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("MISUSE",
                                np.array([json.dumps(misuse).encode()], dtype=np.object_)),
                pb_utils.Tensor("COUNTER_VALUE",
                                np.array([self.counter.value()], dtype=np.float64)),
            ]))
        return responses
