"""Broken twin of gru_seq2seq_task: teacher forcing without the shift: the decoder reads the answer itself
(``tgt_in`` = the labels, not the labels shifted right behind the start token), so each output learns to copy
the token it is given instead of predicting the next one."""

from tests.blind.gru_seq2seq_task import make

task = make(shift=False)
