"""The compared families' own parts, one file each (``mobilebert``). The families that are BERT's layer with switches
(ALBERT, DistilBERT, ELECTRA, TinyBERT) are ``SqueezeBertConfig.family`` settings of ``model.py`` plus their name
tables in ``convert.py``."""
