"""Reading models, corpora and attention out of Hugging Face transformers."""
