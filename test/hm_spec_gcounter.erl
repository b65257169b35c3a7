%% @doc Declarative specification of the grow-only counter: the value is the sum of every
%% increment in the history (happened-before does not matter: increments commute).
-module(hm_spec_gcounter).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() ->
    frequency([{3, increment}, {2, {increment, range(0, 5)}}]).

spec(History) -> lists:sum([amount(Op) || {_, _, Op, _} <- History]).

amount(increment) -> 1;
amount({increment, N}) -> N.
