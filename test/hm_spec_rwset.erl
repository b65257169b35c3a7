%% @doc Declarative specification of the remove-wins set: among the operations that name `E',
%% take the causally maximal ones; `E' is present iff they include an add and no remove.
-module(hm_spec_rwset).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() ->
    E = hm_spec_awset:elem(),
    frequency([{4, {add, E}}, {3, {remove, E}},
               {1, {add_all, list(E)}}, {1, {remove_all, list(E)}}]).

spec(History) ->
    Elems = lists:usort([E || {_, _, Op, _} <- History,
                              E <- element(2, hm_spec_awset:names(Op))]),
    [E || E <- Elems,
          begin
              Kinds = [element(1, hm_spec_awset:names(Op))
                       || {_, _, Op, _} <- hm_spec:maximal(naming(E, History))],
              lists:member(add, Kinds) andalso not lists:member(remove, Kinds)
          end].

naming(E, History) ->
    [I || I = {_, _, Op, _} <- History,
          lists:member(E, element(2, hm_spec_awset:names(Op)))].
