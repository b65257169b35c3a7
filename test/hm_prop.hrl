%% Shared by the PropEr property modules of test/.
%%
%% PropEr 1.2 calls erlang:get_stacktrace/0 (gone since OTP 23) when a property raises, which
%% loses the counterexample: ?SAFE_FORALL turns an exception into a plain failure, so it is
%% shown and shrunk.
-include_lib("proper/include/proper.hrl").

-define(SAFE_FORALL(X, Gen, Prop), ?FORALL(X, Gen, hm_crdt_prop:safe(fun() -> Prop end))).
