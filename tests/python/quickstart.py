from nanoserve import LLM, SamplingParams

llm = LLM(model="models/SmolLM2-135M-Instruct.Q4_1.gguf")
params = SamplingParams(temperature=0, max_tokens=32)
prompts = ["The capital of France is", "Three colors are"]
for out in llm.generate(prompts, params):
    print(repr(out.prompt), "->", repr(out.outputs[0].text))
chat = llm.chat([{"role": "user", "content": "Name three colors."}], params)
print(chat[0].outputs[0].text)
