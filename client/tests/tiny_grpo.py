"""A real TRL GRPOTrainer on a tiny randomly initialised Llama built from a config, with a tokenizer trained here
on a few sentences (nothing is downloaded). CPU, a few seconds per step."""

from __future__ import annotations


def tiny_grpo_trainer(output_dir, *, max_steps=2, seed=0, gradient_accumulation_steps=1, save_steps=None):
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(seed)
    corpus = [
        "the cat sat on the mat",
        "a dog ran in the park",
        "two plus two is four",
        "say hello to the world",
        "list the files in the folder",
        "fix the failing test now",
    ]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[BOS]", "[EOS]"]))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    model = LlamaForCausalLM(config)
    prompts = ["the cat", "a dog", "two plus", "say hello", "list the", "fix the", "the dog", "a cat"]
    dataset = Dataset.from_dict({"prompt": prompts})

    def reward_len(completions, **kwargs):
        return [float(len(c.split())) for c in completions]

    args = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=max_steps,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        use_cpu=True,
        bf16=False,
        seed=seed,
        gradient_accumulation_steps=gradient_accumulation_steps,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=model, reward_funcs=reward_len, args=args, train_dataset=dataset, processing_class=tokenizer
    )
