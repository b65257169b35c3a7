%% @doc The shared PropEr harness for every CRDT type x flavor.
%%
%% `prop_converges(Type, Flavor)': 2–5 replicas, random operations at random replicas, a random
%% delivery schedule (any order, duplicates, events never delivered), interleaved stability
%% compactions; then a final exchange (state/delta: every replica merges every other; op: every
%% event to every replica, newest first). It checks, along the way, that each replica's
%% `hm_crdt:delivered/1' equals an independent model of what it has seen, that compaction never
%% changes a value; at the end that all replicas show the same value, that this value equals
%% the type's declarative specification (test/hm_spec_TYPE.erl) over the operations and their
%% happened-before relation, and (op) that after stability no timestamp is left.
%%
%% Replica knowledge model: state events carry everything their sender had seen; delta and op
%% events carry one operation, delivered once its causal past has been (the model of causal
%% delivery the implementation must match).
-module(hm_crdt_prop).
-include_lib("proper/include/proper.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_converges/2, prop_merge_laws/2, prop_delta_mutators/1, prop_binary/2,
         prop_delta_any_order/1, prop_delta_intervals/1, prop_value_parts/2, prop_stable_groups/1, run/4, numtests/0, check/1, types/0, safe/1]).

-define(REPLICAS, {a, b, c, d, e}).

%% Types whose modules exist (so the harness can run while the library grows).
types() -> [T || T <- hm_crdt:types(), code:ensure_loaded(hm_crdt:module(T)) =:= {module, hm_crdt:module(T)}].

numtests() ->
    case os:getenv("PROPER_NUMTESTS") of
        false -> 300;
        "" -> 300;
        N -> list_to_integer(N)
    end.

%% Run a property body, turning an exception into a failure that PropEr shows and shrinks
%% (see ?SAFE_FORALL in hm_prop.hrl).
safe(F) ->
    try F()
    catch Class:Reason:Stack ->
            ?WHENFAIL(io:format(user, "raised ~p:~p~n  at ~p~n",
                                [Class, Reason, lists:sublist(Stack, 3)]), false)
    end.

check(Prop) ->
    proper:quickcheck(Prop, [{numtests, numtests()}, {to_file, user}, {max_shrinks, 200}]).


%%% ---------------------------------------------------------------- convergence + spec

step(Spec) ->
    frequency([{4, {mutate, range(1, 5), Spec:gen_op()}},
               {5, {deliver, non_neg_integer(), range(1, 5)}},
               {1, stabilize}]).

prop_converges(Type, Flavor) ->
    Spec = hm_spec:spec_module(Type),
    ?FORALL({N, Steps}, {range(2, 5), list(step(Spec))},
            begin
                Res = run(Type, Flavor, N, Steps),
                ?WHENFAIL(io:format(user, "~p ~p: ~p~n", [Type, Flavor, Res]), Res =:= ok)
            end).

%% Runs a schedule; `ok' or a description of what failed.
run(Type, Flavor, N, Steps) ->
    Spec = hm_spec:spec_module(Type),
    S0 = #{type => Type, flavor => Flavor, n => N,
           crdt => maps:from_list([{I, hm_crdt:new(Type, Flavor)} || I <- lists:seq(1, N)]),
           seen => maps:from_list([{I, sets:new([{version, 2}])} || I <- lists:seq(1, N)]),
           pend => maps:from_list([{I, []} || I <- lists:seq(1, N)]),
           events => [], hist => [], next => 1},
    try
        S1 = lists:foldl(fun(Step, S) -> exec(Step, S) end, S0, Steps),
        S2 = final_exchange(S1),
        Values = [hm_crdt:value(C) || C <- maps:values(maps:get(crdt, S2))],
        Expected = Spec:spec(lists:reverse(maps:get(hist, S2))),
        [throw({diverged, Values}) || length(lists:usort(Values)) =/= 1],
        [throw({pending_left, [hm_crdt:pending(C) || C <- maps:values(maps:get(crdt, S2))]})
         || lists:any(fun(C) -> hm_crdt:pending(C) =/= 0 end, maps:values(maps:get(crdt, S2)))],
        [throw({spec, Expected, hd(Values)}) || hd(Values) =/= Expected],
        S3 = exec(quiescent_stabilize, S2),
        case Flavor of
            op ->
                Meta = [hm_crdt:metadata(C) || C <- maps:values(maps:get(crdt, S3))],
                [throw({metadata_left, Meta}) || lists:any(fun(M) -> M =/= 0 end, Meta)],
                ok;
            _ -> ok
        end
    catch throw:Why -> Why;
          %% PropEr 1.2 on OTP 25 loses the counterexample of a property that raises
          %% (it calls the removed erlang:get_stacktrace/0): turn crashes into failures
          Class:Reason:Stack -> {crashed, Class, Reason, Stack}
    end.

replica(I) -> element(I, ?REPLICAS).

exec({mutate, I0, Op}, S = #{n := N, crdt := Cs, seen := Seen, events := Evs, hist := H,
                             next := Id, flavor := F}) ->
    I = (I0 - 1) rem N + 1,
    case hm_crdt:mutate(Op, replica(I), maps:get(I, Cs)) of
        {ok, C1, Ev} ->
            Past = maps:get(I, Seen),
            Seen1 = sets:add_element(Id, Past),
            Carried = case F of
                          state -> {state, Seen1};
                          _ -> {one, Id, Past}
                      end,
            check_delivered(I, C1,
                            S#{crdt := Cs#{I := C1}, seen := Seen#{I := Seen1},
                               events := Evs ++ [{Ev, Carried}],
                               hist := [{Id, replica(I), Op, Past} | H], next := Id + 1});
        {error, Why} -> throw({mutate_failed, Op, Why})
    end;
exec({deliver, _, _}, S = #{events := []}) -> S;
exec({deliver, K, J0}, S = #{n := N, events := Evs}) ->
    J = (J0 - 1) rem N + 1,
    deliver_to(J, lists:nth(K rem length(Evs) + 1, Evs), S);
exec(quiescent_stabilize, S = #{crdt := Cs}) ->
    %% every replica delivered every operation and none is in flight: everything is stable
    [All] = lists:usort([hm_crdt:delivered(C) || C <- maps:values(Cs)]),
    S#{crdt := maps:map(fun(_, C) -> stable_same_value(All, C) end, Cs)};
exec(stabilize, S = #{crdt := Cs}) ->
    S#{crdt := maps:map(fun(I, C) -> stable_same_value(stable_vv(I, S), C) end, Cs)}.

stable_same_value(V, C) ->
    C1 = hm_crdt:stable(V, C),
    V0 = hm_crdt:value(C), V1 = hm_crdt:value(C1),
    [throw({stabilize_changed_value, V0, V1}) || V0 =/= V1],
    C1.

%% The Hypermnesia paper's Algorithm 1, "check stability", at replica I: the minimum over
%% every replica J of the timestamp of the last operation of J that I has delivered (its
%% own: everything delivered).
stable_vv(I, #{n := N, seen := Seen, hist := H}) ->
    Known = maps:get(I, Seen),
    Own = vv_of(Known, H),
    Last = fun(J) ->
                   case [It || It = {Id, R, _, _} <- H, R =:= replica(J),
                               sets:is_element(Id, Known)] of
                       [] -> hm_vv:new();
                       [{Id, _, _, Past} | _] -> vv_of(sets:add_element(Id, Past), H)
                   end
           end,
    lists:foldl(fun(J, V) when J =:= I -> V;
                   (J, V) -> hm_vv:meet(V, Last(J))
                end, Own, lists:seq(1, N)).

vv_of(Ids, H) ->
    lists:foldl(fun({Id, R, _, _}, V) ->
                        case sets:is_element(Id, Ids) of
                            true -> hm_vv:increment(R, V);
                            false -> V
                        end
                end, hm_vv:new(), H).

deliver_to(J, {Ev, Carried}, S = #{crdt := Cs, seen := Seen, pend := Pend}) ->
    C1 = case hm_crdt:deliver(Ev, maps:get(J, Cs)) of
             {error, Why} -> throw({deliver_failed, Why});
             C -> C
         end,
    {SeenJ, PendJ} = model_deliver(Carried, maps:get(J, Seen), maps:get(J, Pend)),
    check_delivered(J, C1, S#{crdt := Cs#{J := C1}, seen := Seen#{J := SeenJ},
                              pend := Pend#{J := PendJ}}).

model_deliver({state, Carried}, Seen, Pend) -> {sets:union(Seen, Carried), Pend};
model_deliver({one, Id, Past}, Seen, Pend) ->
    case sets:is_element(Id, Seen) of
        true -> {Seen, Pend};
        false -> drain(Seen, [{Id, Past} | Pend])
    end.

drain(Seen, Pend) ->
    case lists:partition(fun({_, Past}) -> sets:is_subset(Past, Seen) end, Pend) of
        {[], _} -> {Seen, Pend};
        {Ready, Rest} ->
            Seen1 = lists:foldl(fun({Id, _}, Acc) -> sets:add_element(Id, Acc) end, Seen, Ready),
            drain(Seen1, [P || P = {Id, _} <- Rest, not sets:is_element(Id, Seen1)])
    end.

%% The implementation's delivered vector must equal the model's knowledge.
check_delivered(I, C, S = #{seen := Seen, hist := H}) ->
    Model = vv_of(maps:get(I, Seen), H),
    case hm_crdt:delivered(C) of
        Model -> S;
        Other -> throw({delivered_mismatch, replica(I), Other, Model})
    end.

final_exchange(S = #{flavor := op, n := N, events := Evs}) ->
    lists:foldl(fun(J, Acc) ->
                        lists:foldl(fun(E, A) -> deliver_to(J, E, A) end, Acc, lists:reverse(Evs))
                end, S, lists:seq(1, N));
final_exchange(S = #{n := N, crdt := Cs, seen := Seen}) ->
    All = lists:foldl(fun(C, Acc) -> hm_crdt:merge(Acc, C) end, maps:get(1, Cs),
                      maps:values(Cs)),
    AllSeen = lists:foldl(fun sets:union/2, sets:new([{version, 2}]), maps:values(Seen)),
    Cs1 = maps:map(fun(_, C) -> hm_crdt:merge(C, All) end, Cs),
    S1 = S#{crdt := Cs1, seen := maps:map(fun(_, _) -> AllSeen end, Seen)},
    lists:foldl(fun(I, A) -> check_delivered(I, maps:get(I, Cs1), A) end, S1, lists:seq(1, N)).

%%% ---------------------------------------------------------------- lattice laws

%% Three replicas' states after a random schedule without final exchange.
three_states(Type, Flavor) ->
    Spec = hm_spec:spec_module(Type),
    ?LET(Steps, list(step(Spec)),
         begin
             S = lists:foldl(fun(St, A) -> exec(St, A) end, init(Type, Flavor, 3), Steps),
             [maps:get(I, maps:get(crdt, S)) || I <- [1, 2, 3]]
         end).

init(Type, Flavor, N) ->
    #{type => Type, flavor => Flavor, n => N,
      crdt => maps:from_list([{I, hm_crdt:new(Type, Flavor)} || I <- lists:seq(1, N)]),
      seen => maps:from_list([{I, sets:new([{version, 2}])} || I <- lists:seq(1, N)]),
      pend => maps:from_list([{I, []} || I <- lists:seq(1, N)]),
      events => [], hist => [], next => 1}.

prop_merge_laws(Type, Flavor) ->
    ?FORALL([A, B, C], three_states(Type, Flavor),
            begin
                L = fun hm_crdt:lattice/1,
                M = fun hm_crdt:merge/2,
                L(M(A, B)) =:= L(M(B, A)) andalso
                    L(M(M(A, B), C)) =:= L(M(A, M(B, C))) andalso
                    L(M(A, A)) =:= L(A)
            end).

%% join(X, delta(Op, R, X)) equals the full mutator, with both joins.
prop_delta_mutators(Type) ->
    Mod = hm_crdt:module(Type),
    Spec = hm_spec:spec_module(Type),
    ?FORALL({[X | _], Op, I}, {three_states(Type, state), Spec:gen_op(), range(1, 3)},
            begin
                R = replica(I),
                X0 = hm_crdt:lattice(X),
                Full = Mod:update(Op, R, X0),
                Delta = Mod:delta(Op, R, X0),
                J1 = hm_dcc:join(X0, Delta),
                J2 = hm_dcc:join_delta(X0, Delta),
                ?WHENFAIL(io:format(user, "full ~p~njoin ~p~njoin_delta ~p~n", [Full, J1, J2]),
                          Full =:= J1 andalso Full =:= J2)
            end).

%% Raw deltas joined in any order, with duplicates, give the same state.
prop_delta_any_order(Type) ->
    Spec = hm_spec:spec_module(Type),
    ?FORALL({Ops, Seed}, {non_empty(list({range(1, 3), Spec:gen_op()})), integer()},
            begin
                {_, Deltas} = lists:foldl(
                                fun({I, Op}, {C, Acc}) ->
                                        {ok, C1, {hm_event, delta, _, {_, _, D}}} =
                                            hm_crdt:mutate(Op, replica(I), C),
                                        {C1, [D | Acc]}
                                end, {hm_crdt:new(Type, delta), []}, Ops),
                Empty = hm_dcc:new((hm_crdt:module(Type)):empty_store()),
                InOrder = lists:foldl(fun(D, A) -> hm_dcc:join(A, D) end, Empty,
                                      lists:reverse(Deltas)),
                {Keys, _} = lists:mapfoldl(fun(_, St) -> rand:uniform_s(St) end,
                                           rand:seed_s(exsss, {Seed, 1, 2}), Deltas ++ Deltas),
                Shuffled = [D || {_, D} <- lists:sort(lists:zip(Keys, Deltas ++ Deltas))],
                Any = lists:foldl(fun(D, A) -> hm_dcc:join(A, D) end, Empty, Shuffled),
                InOrder =:= Any
            end).

%% Delta-intervals (*Delta State Replicated Data Types*, Definition 4): replicas mutate and
%% deliver each other's deltas; then each origin's deltas, cut into runs at random and each
%% run joined by hm_crdt:coalesce/1, reach a fresh replica in a random order, with duplicates
%% and with some of the single deltas too (an interval may then overlap what was
%% delivered). It ends with the state, the delivered vector and no buffered event of a
%% replica that delivered every single delta.
prop_delta_intervals(Type) ->
    Spec = hm_spec:spec_module(Type),
    Step = frequency([{4, {mutate, range(1, 3), Spec:gen_op()}},
                      {1, {sync, range(1, 3), range(1, 3)}}]),
    ?FORALL({Steps, Cuts, Seed}, {non_empty(list(Step)), list(boolean()), integer()},
            safe(fun() -> delta_intervals(Type, Steps, Cuts, Seed) end)).

delta_intervals(Type, Steps, Cuts, Seed) ->
    New = hm_crdt:new(Type, delta),
    Cs0 = #{1 => New, 2 => New, 3 => New},
    {_, Evs} = lists:foldl(
                 fun({mutate, I, Op}, {Cs, Acc}) ->
                         {ok, C1, E} = hm_crdt:mutate(Op, replica(I), maps:get(I, Cs)),
                         {Cs#{I := C1}, Acc ++ [{I, E}]};
                    ({sync, I, J}, {Cs, Acc}) ->
                         %% J delivers every delta of I's origin made so far
                         CJ = lists:foldl(fun({O, E}, C) when O =:= I -> hm_crdt:deliver(E, C);
                                             (_, C) -> C
                                          end, maps:get(J, Cs), Acc),
                         {Cs#{J := CJ}, Acc}
                 end, {Cs0, []}, Steps),
    All = lists:foldl(fun({_, E}, C) -> hm_crdt:deliver(E, C) end, New, Evs),
    {Runs, _} = lists:mapfoldl(
                  fun(I, CutsLeft) ->
                          Own = [E || {O, E} <- Evs, O =:= I],
                          cut_runs(Own, CutsLeft)
                  end, Cuts ++ [true || _ <- Evs], [1, 2, 3]),
    Intervals = lists:append([hm_crdt:coalesce(R) || R <- lists:append(Runs)]),
    Singles = [E || {{_, E}, true} <- lists:zip(Evs, lists:sublist(Cuts ++ [false || _ <- Evs],
                                                                   length(Evs)))],
    Sent = Intervals ++ Intervals ++ Singles,
    {Keys, _} = lists:mapfoldl(fun(_, St) -> rand:uniform_s(St) end,
                               rand:seed_s(exsss, {Seed, 3, 4}), Sent),
    Shuffled = [E || {_, E} <- lists:sort(lists:zip(Keys, Sent))],
    Got = lists:foldl(fun(E, C) ->
                              case hm_crdt:deliver(E, C) of
                                  {error, Why} -> throw({deliver_failed, Why, E});
                                  C1 -> C1
                              end
                      end, New, Shuffled),
    Result = {hm_crdt:lattice(Got), hm_crdt:delivered(Got), hm_crdt:pending(Got)},
    Expected = {hm_crdt:lattice(All), hm_crdt:delivered(All), 0},
    ?WHENFAIL(io:format(user, "got ~p~nexpected ~p~n", [Result, Expected]),
              Result =:= Expected).

%% An origin's events cut into runs where the next cut says so (at least one run).
cut_runs([], Cuts) -> {[], Cuts};
cut_runs(Evs, Cuts) ->
    {Runs, Run, Left} = lists:foldl(fun(E, {Rs, [], Cs}) -> {Rs, [E], Cs};
                                       (E, {Rs, R, [true | Cs]}) -> {[lists:reverse(R) | Rs], [E], Cs};
                                       (E, {Rs, R, [_ | Cs]}) -> {Rs, [E | R], Cs};
                                       (E, {Rs, R, []}) -> {Rs, [E | R], []}
                                    end, {[], [], Cuts}, Evs),
    {lists:reverse([lists:reverse(Run) | Runs]), Left}.

%% A value made in two steps (the table's process lists, the reader finishes) is the value,
%% and whether a replica holds timestamps is whether it counts any.
prop_value_parts(Type, Flavor) ->
    ?FORALL(Cs, three_states(Type, Flavor),
            lists:all(fun(C) ->
                              hm_crdt:finish_value(hm_crdt:value_parts(C)) =:= hm_crdt:value(C)
                                  andalso hm_crdt:has_timestamps(C) =:=
                                  (Flavor =:= op andalso hm_crdt:metadata(C) > 0)
                      end, Cs)).

%% Op flavor: causal stability for the groups the newly stable operations name
%% (hm_crdt:stable/3) gives, tick after tick, what a pass over the whole PO-log gives.
prop_stable_groups(Type) ->
    Spec = hm_spec:spec_module(Type),
    Step = frequency([{5, {mutate, range(1, 2), Spec:gen_op()}}, {1, sync}]),
    ?FORALL({Steps, Cuts}, {non_empty(list(Step)), list({range(0, 20), range(0, 20)})},
            safe(fun() -> stable_groups(Type, Steps, Cuts) end)).

stable_groups(Type, Steps, Cuts) ->
    New = hm_crdt:new(Type, op),
    {_, Evs} = lists:foldl(
                 fun({mutate, I, Op}, {Cs, Acc}) ->
                         {ok, C1, E} = hm_crdt:mutate(Op, replica(I), maps:get(I, Cs)),
                         {Cs#{I := C1}, Acc ++ [E]};
                    (sync, {Cs, Acc}) ->
                         {maps:map(fun(_, C) -> lists:foldl(fun hm_crdt:deliver/2, C, Acc) end,
                                   Cs), Acc}
                 end, {#{1 => New, 2 => New}, []}, Steps),
    All = lists:foldl(fun hm_crdt:deliver/2, New, Evs),
    Max = hm_crdt:delivered(All),
    %% stable vectors that only grow, ending with everything
    Vs = lists:foldl(fun({A, B}, [Prev | _] = Acc) ->
                             V = hm_vv:join(Prev, hm_vv:meet(Max, #{a => A, b => B})),
                             [V | Acc]
                     end, [#{}], Cuts ++ [{1000, 1000}]),
    {_, _, Ok} =
        lists:foldl(fun(V, {Full, Some, Prev}) ->
                            Groups = lists:append(
                                       [case hm_crdt:op_groups(Type, PureOp) of
                                            all -> [all];
                                            Gs -> Gs
                                        end || {hm_event, op, _, {O, Ts, PureOp}} <- Evs,
                                               Dot <- [{O, maps:get(O, Ts)}],
                                               hm_vv:contains(Dot, V),
                                               not hm_vv:contains(Dot, Prev)]),
                            Gs1 = case lists:member(all, Groups) of
                                      true -> all;
                                      false -> Groups
                                  end,
                            Full1 = hm_crdt:stable(V, Full),
                            Some1 = hm_crdt:stable(V, Gs1, Some),
                            [throw({differs, V, Full1, Some1}) || Full1 =/= Some1],
                            {Full1, Some1, V}
                    end, {All, All, #{}}, lists:reverse(Vs)),
    Ok =/= undefined.

%%% ---------------------------------------------------------------- encoding

prop_binary(Type, Flavor) ->
    ?FORALL({[A | _], Garbage, Flip}, {three_states(Type, Flavor), binary(), non_neg_integer()},
            begin
                Bin = hm_crdt:to_binary(A),
                Pos = Flip rem byte_size(Bin),
                <<Pre:Pos/binary, Byte, Post/binary>> = Bin,
                Flipped = <<Pre/binary, (Byte bxor 16#5A), Post/binary>>,
                hm_crdt:from_binary(Bin) =:= {ok, A} andalso
                    element(1, hm_crdt:from_binary(Flipped)) =:= error andalso
                    element(1, hm_crdt:from_binary(Garbage)) =:= error
            end).

%%% ---------------------------------------------------------------- EUnit entry points

converges_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("converges: ~p/~p", [T, F])),
                     ?_assert(check(prop_converges(T, F)))}}
     || T <- types(), F <- hm_crdt:flavors()].

merge_laws_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("merge laws: ~p/~p", [T, F])),
                     ?_assert(check(prop_merge_laws(T, F)))}}
     || T <- types(), F <- [state, delta]].

delta_mutators_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("delta = full mutator: ~p", [T])),
                     ?_assert(check(prop_delta_mutators(T)))}} || T <- types()].

delta_any_order_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("deltas in any order: ~p", [T])),
                     ?_assert(check(prop_delta_any_order(T)))}} || T <- types()].

delta_intervals_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("delta-intervals: ~p", [T])),
                     ?_assert(check(prop_delta_intervals(T)))}} || T <- types()].

value_parts_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("value in two steps: ~p/~p", [T, F])),
                     ?_assert(check(prop_value_parts(T, F)))}}
     || T <- types(), F <- hm_crdt:flavors()].

%% A set's process lists its elements unsorted: the reader sorts them.
set_value_parts_test() ->
    {ok, C, _} = hm_crdt:mutate({add_all, [c, a, b]}, a, hm_crdt:new(awset, delta)),
    {sort, L} = hm_crdt:value_parts(C),
    ?assertEqual([a, b, c], lists:sort(L)),
    O = hm_crdt:new(awset, op),
    {ok, P} = hm_crdt:prepare({add_all, [c, a]}, a, O),
    O1 = hm_crdt:effect(P, {a, 1}, #{a => 1}, O),
    ?assertMatch({sort, [_, _]}, hm_crdt:value_parts(O1)),
    ?assert(hm_crdt:has_timestamps(O1)),
    ?assertNot(hm_crdt:has_timestamps(hm_crdt:stable(#{a => 1}, O1))).

stable_groups_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("stability by groups: ~p", [T])),
                     ?_assert(check(prop_stable_groups(T)))}} || T <- types()].

%% An op set's stability looks at the elements it is told of only.
stable_named_groups_test() ->
    O = hm_crdt:new(awset, op),
    O1 = lists:foldl(fun({E, N}, C) ->
                             {ok, P} = hm_crdt:prepare({add, E}, a, C),
                             hm_crdt:effect(P, {a, N}, #{a => N}, C)
                     end, O, [{x1, 1}, {x2, 2}, {x3, 3}, {y, 4}]),
    ?assertEqual([y], hm_crdt:op_groups(awset, {add, y})),
    ?assertEqual(all, hm_crdt:op_groups(gcounter, {increment, 1})),
    O2 = hm_crdt:stable(#{a => 4}, [y], O1),
    ?assertEqual(3, hm_crdt:metadata(O2)),          % the x's not named: still timestamped
    ?assertEqual([x1, x2, x3, y], hm_crdt:value(O2)),
    ?assertEqual(0, hm_crdt:metadata(hm_crdt:stable(#{a => 4}, [x1, x2, x3], O2))),
    ?assertEqual(0, hm_crdt:metadata(hm_crdt:stable(#{a => 4}, all, O1))).

binary_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("binary round trip: ~p/~p", [T, F])),
                     ?_assert(check(prop_binary(T, F)))}}
     || T <- types(), F <- hm_crdt:flavors()].
