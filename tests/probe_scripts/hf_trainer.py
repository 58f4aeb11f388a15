"""A script around the Hugging Face Trainer on a tiny random-init GPT-2 (no Cockpit in it, nothing downloaded).

--resume continues from the newest checkpoint in --out (trainer.train(resume_from_checkpoint=True)).
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.rows = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="hf_out")
    ap.add_argument("--max-steps", type=int, default=12)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    model = GPT2LMHeadModel(config)
    targs = TrainingArguments(
        output_dir=args.out,
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        warmup_steps=2,
        eval_strategy="steps",
        eval_steps=3,
        save_steps=4,
        logging_steps=1000,
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(96, 16, 1), eval_dataset=Tokens(16, 16, 2))
    trainer.train(resume_from_checkpoint=True if args.resume else None)


if __name__ == "__main__":
    main()
