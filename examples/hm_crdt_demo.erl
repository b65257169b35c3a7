%% @doc The CRDT library on its own: three replicas of a shopping cart, a partition, writes on
%% both sides (including a concurrent re-add and remove of the same item), heal, convergence.
%%
%% It runs the CRDT library ({@link hm_crdt}) in one process with a simulated network. Events
%% between the two sides are held during the partition and delivered in a scrambled order at
%% the heal, so causal delivery inside `hm_crdt:deliver/2' has real work to do. Run it with
%% `make demo-crdt'. `make demo' ({@link hm_demo}) shows the same story on real nodes with
%% eventually consistent Mnesia tables. Like every demo it lives in `examples/', outside the
%% application; test/hm_crdt_tests.erl runs it in every flavor.
-module(hm_crdt_demo).

-export([main/0, run/1]).

-define(REPLICAS, [a, b, c]).

%% @doc Run the demo in every flavor and print it.
-spec main() -> ok.
main() ->
    lists:foreach(fun(F) -> ok = run(F) end, [op, delta, state]).

%% @doc Run the demo with one flavor; `ok' once every replica shows the same cart.
-spec run(hm_crdt:flavor()) -> ok | {error, {diverged, [term()]}}.
run(Flavor) ->
    io:format("~n=== flavor ~p: a shopping cart (map of an add-wins set and counters) ===~n",
              [Flavor]),
    Net0 = #{replicas => maps:from_list([{R, hm_crdt:new(map, Flavor)} || R <- ?REPLICAS]),
             held => [], cut => []},
    Net1 = write(a, {update, items, awset, {add_all, [apples, bread]}}, Net0),
    Net2 = write(b, {update, qty_apples, pncounter, {increment, 3}}, Net1),
    show("all connected, two writes", Net2),

    Net3 = Net2#{cut := [c]},
    io:format("~n-- partition: {a, b} | {c} --~n"),
    Net4 = write(a, {update, items, awset, {remove, bread}}, Net3),
    Net5 = write(c, {update, items, awset, {add, bread}}, Net4),         % concurrent re-add
    Net6 = write(c, {update, qty_apples, pncounter, decrement}, Net5),
    Net7 = write(b, {update, qty_apples, pncounter, {increment, 2}}, Net6),
    Net8 = write(c, {update, coupon, ewflag, enable}, Net7),
    show("during the partition: each side writes", Net8),

    io:format("~n-- heal: held events delivered, newest first --~n"),
    Net9 = heal(Net8),
    show("after the heal", Net9),
    Values = lists:usort([hm_crdt:value(C) || C <- maps:values(maps:get(replicas, Net9))]),
    case Values of
        [_] -> io:format("converged: every replica shows the same cart "
                         "(bread re-added concurrently with its removal: add wins; "
                         "quantity 3 - 1 + 2 = 4)~n"),
               ok;
        _ -> {error, {diverged, Values}}
    end.

%% Write at replica R and send the event to every replica on the same side; hold the rest.
write(R, Op, Net = #{replicas := Rs, held := Held, cut := Cut}) ->
    {ok, C1, Ev} = hm_crdt:mutate(Op, R, maps:get(R, Rs)),
    io:format("  ~p: ~p~n", [R, Op]),
    Others = [P || P <- ?REPLICAS, P =/= R],
    {Now, Later} = lists:partition(fun(P) -> side(P, Cut) =:= side(R, Cut) end, Others),
    Rs1 = lists:foldl(fun(P, Acc) -> Acc#{P := hm_crdt:deliver(Ev, maps:get(P, Acc))} end,
                      Rs#{R := C1}, Now),
    Net#{replicas := Rs1, held := Held ++ [{P, Ev} || P <- Later]}.

side(R, Cut) -> lists:member(R, Cut).

%% Deliver what was held, newest first: the causal buffer puts it back in order.
heal(Net = #{replicas := Rs, held := Held}) ->
    Rs1 = lists:foldl(fun({P, Ev}, Acc) -> Acc#{P := hm_crdt:deliver(Ev, maps:get(P, Acc))} end,
                      Rs, lists:reverse(Held)),
    Net#{replicas := Rs1, held := [], cut := []}.

show(Title, #{replicas := Rs}) ->
    io:format("~n  ~s~n  ~-8s ~-22s ~-10s ~-7s~n", [Title, "replica", "items", "qty_apples",
                                                   "coupon"]),
    lists:foreach(
      fun(R) ->
              V = hm_crdt:value(maps:get(R, Rs)),
              io:format("  ~-8s ~-22s ~-10s ~-7s~n",
                        [atom_to_list(R), fmt(field(items, V)), fmt(field(qty_apples, V)),
                         fmt(field(coupon, V))])
      end, ?REPLICAS).

field(K, V) ->
    case [X || {K1, _, X} <- V, K1 =:= K] of
        [X] -> X;
        [] -> '-'
    end.

fmt('-') -> "-";
fmt(X) -> lists:flatten(io_lib:format("~0p", [X])).
