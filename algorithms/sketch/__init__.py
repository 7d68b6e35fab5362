"""Count-sketch methods: FetchSGD and SketchedAMSGrad (nodes send count sketches, which the comm
layer sums; the server recovers the heavy coordinates)."""
