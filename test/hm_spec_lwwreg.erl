%% @doc Declarative specification of the last-writer-wins register: over every assign of the
%% history, the value of the one with the greatest `{Ts, Replica}'; two assigns with the same
%% key (same replica) are ordered by happened-before, the later one wins. `undefined' when
%% there is no assign. Only explicit timestamps over a tiny range, so ties are frequent (the
%% automatic timestamp is wall-clock based and tested in hm_registers_tests).
-module(hm_spec_lwwreg).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() -> {assign, oneof([x, y, z]), range(0, 3)}.

spec(History) ->
    case lists:foldl(fun later/2, none, History) of
        none -> undefined;
        {_, _, {assign, V, _}, _} -> V
    end.

later(I, none) -> I;
later(I, Best) ->
    case {key(I), key(Best)} of
        {K, KB} when K > KB -> I;
        {K, K} -> case hm_spec:before(Best, I) of
                      true -> I;
                      false -> Best
                  end;
        _ -> Best
    end.

key({_, R, {assign, _, Ts}, _}) -> {Ts, R}.
