"""Reference side of test_tokenizer.py, run with .venv-tests/bin/python (the `tokenizers` package):
  train CORPUS_DIR OUT.json   trains a byte-level BPE tokenizer (vocabulary 1000, "<|endoftext|>")
  encode TOKENIZER TEXTFILE   prints the ids of the file's text as a JSON list"""
import glob, json, sys

from tokenizers import ByteLevelBPETokenizer, Tokenizer

if sys.argv[1] == "train":
    tok = ByteLevelBPETokenizer()
    tok.train(sorted(glob.glob(f"{sys.argv[2]}/*")), vocab_size=1000, min_frequency=2,
              special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save(sys.argv[3])
elif sys.argv[1] == "encode":
    text = open(sys.argv[3], encoding="utf-8", newline="").read()
    print(json.dumps(Tokenizer.from_file(sys.argv[2]).encode(text).ids))
