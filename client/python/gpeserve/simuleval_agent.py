"""A SimulEval (1.1.4) text-to-text agent backed by a live gpeserve session.

    simuleval --agent "$(python -c 'import gpeserve.simuleval_agent as a; print(a.__file__)')" \\
        --source src.txt --target tgt.txt --output out --no-use-ref-len \\
        --server 127.0.0.1:50051 --wait-k 3 --end-unit "</end>"

(or --agent-class gpeserve.simuleval_agent.GpeserveAgent). Each sentence is one gpeserve
session with report_waiting: every source word SimulEval hands the agent goes to the server as
it arrives; the agent then reads the server's responses until it waits for source
(WaitingForSource) or ends (SessionDone) and returns the target words completed meanwhile
(WriteAction), or READs when there are none. When the source is finished it sends the end and
returns the rest of the target.

Units, so that SimulEval's AL/LAAL are the server's (docs/GPE.md section 6; gpe-client eval):
- gpeserve's source length is |X| = words + 1 (the end segment) and words written after the end
  have delay words + 1; SimulEval counts only the words it sends. Append an end unit to every
  source line (e.g. " </end>") and pass it as --end-unit: the agent sends the end instead of
  that word, and SimulEval's step then counts it as gpeserve does. Without it SimulEval's AL
  uses |X| = words and gives words written after the end the delay `words`.
- gpeserve's |Y| is the output's words; SimulEval's default is the reference's: run simuleval
  with --no-use-ref-len.
"""
import argparse

from simuleval.agents import TextToTextAgent
from simuleval.agents.actions import ReadAction, WriteAction
from simuleval.utils import entrypoint

from gpeserve.client import Client
from gpeserve.v1 import gpeserve_pb2 as pb


@entrypoint
class GpeserveAgent(TextToTextAgent):
    """Simultaneous translation by a gpeserve server, one session per sentence."""

    def __init__(self, args):
        self.session = None  # GenericAgent.__init__ calls reset()
        super().__init__(args)
        token = None
        if args.token_file:
            with open(args.token_file) as f:
                token = f.read().strip()
        self.client = Client(args.server, token=token, tls_root=args.tls_root,
                             tls_server_name=args.tls_server_name)
        self.settings = {"report_waiting": True}
        for name in ("wait_k", "max_new_tokens", "profile", "instruction", "adapter"):
            value = getattr(args, name)
            if value is not None:
                self.settings[name] = value
        self.end_unit = args.end_unit

    @staticmethod
    def add_args(parser: argparse.ArgumentParser):
        parser.add_argument("--server", default="127.0.0.1:50051", help="gpeserve HOST:PORT")
        parser.add_argument("--wait-k", dest="wait_k", type=int, default=None,
                            help="source words read before the first write (server default: 3)")
        parser.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=None,
                            help="target tokens at most (default: the server's)")
        parser.add_argument("--profile", default=None, help="prompt profile (server default)")
        parser.add_argument("--instruction", default=None, help="override the instruction")
        parser.add_argument("--adapter", default=None, help="a LoRA adapter of the server")
        parser.add_argument("--token-file", dest="token_file", default=None,
                            help="send the token in this file as a bearer token")
        parser.add_argument("--tls-root", dest="tls_root", default=None,
                            help="PEM root certificates: connect with TLS")
        parser.add_argument("--tls-server-name", dest="tls_server_name", default=None,
                            help="the name expected in the server's certificate")
        parser.add_argument("--end-unit", dest="end_unit", default=None,
                            help="a last source word that stands for gpeserve's end segment "
                                 "(sent as the end of the source, not as a word)")

    def reset(self):
        super().reset()
        if self.session is not None and self.session.done is None:
            self.session.cancel()
        self.session = None
        self.sent = 0           # source words handed to the server (the end unit included)
        self.ended = False      # the end of the source was sent
        self.text = ""          # the target text so far
        self.completed = 0      # target words the server flagged complete
        self.written = 0        # target words returned to SimulEval
        self.finished = False   # the server's session is over

    def _words_completed(self):
        """Reads responses until the server waits for source or ends; returns the target words
        completed meanwhile.

        The server flags the delta with which a word ended (word_complete): the c-th flag ends
        the c-th word of the text, whose delta may already start the next word (" lachen"
        after "Schwestern") or end the word itself (a kept ".": "lachen."), so the words to
        return are the text's words up to the number of flags; at the end, all of them."""
        while True:
            message = next(self.session, None)
            if isinstance(message, pb.TokenDelta):
                self.text += message.text
                self.completed += 1 if message.word_complete else 0
            elif isinstance(message, pb.WaitingForSource):
                break
            elif isinstance(message, pb.SessionDone) or message is None:
                self.finished = True
                break
        words = self.text.split()
        upto = len(words) if self.finished else min(self.completed, len(words))
        new, self.written = words[self.written:upto], max(self.written, upto)
        return new

    def policy(self):
        if self.session is None:
            self.session = self.client.stream(**self.settings)
            self._words_completed()  # the prompt is read: the session waits for the first word
        if self.finished:
            return WriteAction("", finished=True)
        new = self.states.source[self.sent:]
        self.sent = len(self.states.source)
        end = self.states.source_finished and not self.ended
        if end and self.end_unit is not None and new and new[-1] == self.end_unit:
            new = new[:-1]  # gpeserve's end segment, not a word
        if not new and not end and not self.ended:
            return ReadAction()  # nothing new for the server: it still waits
        # (With the end sent, read on: a WaitingForSource may have come before the server took
        # the end, and the rest of the target follows it.)
        if new:
            self.session.push(list(new))
        if end:
            self.ended = True
            self.session.end()
        words = self._words_completed()
        if self.finished:
            return WriteAction(" ".join(words), finished=True)
        if words:
            return WriteAction(" ".join(words), finished=False)
        return ReadAction()
