%% @doc Declarative specification of the positive-negative counter: the value is the sum of
%% every increment minus the sum of every decrement in the history (happened-before does not
%% matter: the operations commute).
-module(hm_spec_pncounter).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() ->
    frequency([{3, increment}, {3, decrement},
               {2, {increment, range(0, 5)}}, {2, {decrement, range(0, 5)}}]).

spec(History) -> lists:sum([amount(Op) || {_, _, Op, _} <- History]).

amount(increment) -> 1;
amount(decrement) -> -1;
amount({increment, N}) -> N;
amount({decrement, N}) -> -N.
