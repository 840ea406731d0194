"""A sequence-classification reward model as a reward (MAESTRO's `pref`): its scalar score of (prompt, response).

Raw scores are on the model's own scale; MAESTRO rank-normalises them within each group before mixing.
"""
import torch


class PreferenceReward:
    """Loads `path` (an HF AutoModelForSequenceClassification with one output) once, scores in batches."""

    def __init__(self, path: str, device="cpu", max_length: int = 1024, batch_size: int = 8, dtype=torch.float32):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = _unpartitioned(lambda: AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype))
        self.model = self.model.to(device).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"--reward_model_name_or_path {path}: a reward model has one output (num_labels=1), "
                             f"this one has {self.model.config.num_labels}")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:  # needed to find the last real token of each row
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.max_length, self.batch_size = device, max_length, batch_size
        self.name = "pref"

    def _text(self, prompt: str, completion: str) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                                       {"role": "assistant", "content": completion}], tokenize=False)
        return f"{prompt}\n{completion}"

    @torch.no_grad()
    def score(self, prompts: list, completions: list) -> torch.Tensor:
        """Tensor[N] float32 raw reward-model scores (higher = preferred)."""
        texts = [self._text(p, c) for p, c in zip(prompts, completions)]
        self.tokenizer.padding_side, self.tokenizer.truncation_side = "right", "left"
        out = []
        for s in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[s:s + self.batch_size], padding=True, truncation=True,
                                 max_length=self.max_length, add_special_tokens=False, return_tensors="pt").to(self.device)
            out.append(self.model(**enc).logits[:, 0].float().cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def __call__(self, prompt, completion, sample) -> float:
        return float(self.score([prompt], [completion])[0])


def _unpartitioned(load):
    """load() with transformers' ZeRO-3 switch off: a whole copy of the reward model on each rank.

    The actor's ZeRO-3 engine registers its config with transformers (HfDeepSpeedConfig), and from_pretrained then
    builds every later model under deepspeed.zero.Init: the reward model came out partitioned, with no engine to
    gather its weights, and its first forward failed ("'weight' must be 2-D"). credo's reading: a frozen scorer is
    replicated, as verl's and OpenRLHF's reward models are outside ZeRO-3 training. transformers keeps the config as
    a module-level weak reference (read in transformers 5.17-5.20, integrations/deepspeed.py); it is restored after.
    """
    from transformers.integrations import deepspeed as hf_deepspeed
    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        return load()
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved
