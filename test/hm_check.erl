%% @doc Checks shared by the Common Test suites, the simulator's families and the
%% benchmarks (the `test' and `bench' profiles compile this directory beside `sim/' and
%% `bench/'). Pure: no process, no node of its own.
-module(hm_check).

-export([outcome/1, converged/1]).

%% @doc What `F' returns, or `{Class, Reason}' for what it raised: for calls to nodes or
%% copies that may be down or cut off, and for diagnoses that must not fail themselves.
-spec outcome(fun(() -> R)) -> R | {error | exit | throw, term()}.
outcome(F) ->
    try F() catch Class:Reason -> {Class, Reason} end.

%% @doc Whether the copies' views (their rows, values, digests) are one and the same: what
%% every convergence check comes down to. False for no view at all.
-spec converged([term()]) -> boolean().
converged(Views) -> length(lists:usort(Views)) =:= 1.
