%% @doc Declarative specification of the add-wins set: `E' is present iff some add of `E' is
%% not causally followed by a remove of `E' (equivalently: among the operations that name `E',
%% the causally maximal ones include an add).
-module(hm_spec_awset).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1, elem/0, names/1]).

elem() -> oneof([a, b, c, d]).

gen_op() ->
    frequency([{4, {add, elem()}}, {3, {remove, elem()}},
               {1, {add_all, list(elem())}}, {1, {remove_all, list(elem())}}]).

%% The elements an operation names, and whether it adds them.
names({add, E}) -> {add, [E]};
names({add_all, Es}) -> {add, Es};
names({remove, E}) -> {remove, [E]};
names({remove_all, Es}) -> {remove, Es}.

spec(History) ->
    Elems = lists:usort([E || {_, _, Op, _} <- History, E <- element(2, names(Op))]),
    [E || E <- Elems,
          lists:any(fun({_, _, Op, _}) -> element(1, names(Op)) =:= add end,
                    hm_spec:maximal(naming(E, History)))].

naming(E, History) ->
    [I || I = {_, _, Op, _} <- History, lists:member(E, element(2, names(Op)))].
